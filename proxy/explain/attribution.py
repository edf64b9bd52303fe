"""Which repair made each change: the watched repairs and chain of `streamfix explain`'s
phases (phases.py).

Every repair books what it changes on the exchange's tally (`Tally.count`). Around each hook
call the watchers snapshot `tally.repairs`, so the kinds counted while repair R handled the
request or an event are R's, and they note what the hook did (changed the body; dropped,
replaced, split or added an event). The production phases (`Phases`, `RepairChain`) are
untouched: their hot loops pay nothing for this.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.explain.diff import Change, change_json, closest_changes
from proxy.repair.answer_ends import Piece
from proxy.repair.pipeline import Chunk, Link, RepairChain
from proxy.repair.tally import Tally
from proxy.wire.sse import encode


@dataclass
class Label:
    """One repair's part in one change."""

    repair: str
    """The repair's class name, or `pipeline` for what the stream loop itself did."""
    kinds: dict[str, int] = field(default_factory=dict)
    """What it counted meanwhile, by kind."""
    action: str = ""
    """What it did to the event: `changed`, `dropped`, `split into N`, `added`, `failed: X`."""
    changes: list[Change] = field(default_factory=list)
    """The fields it changed: in the event it passed on, or in the body."""

    def to_json(self) -> dict[str, Any]:
        return {
            "repair": self.repair,
            "kinds": self.kinds,
            "action": self.action,
            "changes": [change_json(change) for change in self.changes],
        }


@dataclass
class Step:
    """One event handed to the chain (from the upstream, or added by a repair at stream end)
    and what the client was sent for it."""

    upstream: bytes | None
    """The event's bytes as received; None for an event a repair added."""
    client: list[bytes] = field(default_factory=list)
    """The events sent for it, encoded as they went out (possibly none)."""
    labels: list[Label] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)
    """What the chain handed on for it, as the answer machine hands it to the door."""


@dataclass
class BodyChange:
    """A request or non-streamed response body, before and after the repairs."""

    before: Any
    after: Any = None
    labels: list[Label] = field(default_factory=list)


class Attribution:
    """What one exchange's repairs did, as explain shows it: the request body before and after
    (with each request repair's part), each event of the answer (`steps`), a non-streamed
    body's trip, and what the links counted at the end."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.translation = dict(tally.repairs)
        """What the door's translation counted: all the tally holds before the repairs run."""
        self.steps: list[Step] = []
        self.body_labels: list[Label] = []
        self.request: BodyChange | None = None
        self.response: BodyChange | None = None
        self.end_labels: list[Label] = []
        """Kinds counted by `on_end` hooks (a store write, a summary), not tied to an event."""

    def snapshot(self) -> Counter[str]:
        return Counter(self.tally.repairs)

    def kinds_since(self, before: Counter[str]) -> dict[str, int]:
        return dict(self.tally.repairs - before)


class _Watched(Link):
    """Runs one link's hooks and reports each call to the chain."""

    def __init__(self, link: Link, chain: AttributingChain) -> None:
        self.inner = link
        self.name = type(link).__name__
        self.stream_framing = link.stream_framing
        self._chain = chain

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        before, original = self._chain.snapshot(), copied(chunk)  # before the link mutates it
        try:
            result = self.inner.on_chunk(chunk)
        except Exception as exc:
            self._chain.attribute(self.name, before, f"failed: {type(exc).__name__}")
            raise
        if result is None:
            self._chain.attribute(self.name, before, "")
        else:
            # Copied now: the links after this one may still change what it passed on.
            changes = closest_changes(original, [copied(out) for out in result])
            self._chain.attribute(self.name, before, _stream_action(chunk, result), changes)
        return result

    async def on_end(self) -> list[Chunk]:
        before = self._chain.snapshot()
        added = await self.inner.on_end()
        self._chain.ending(self.name, self._chain.kinds_since(before), bool(added))
        return added


def _stream_action(chunk: Chunk, result: list[Chunk]) -> str:
    if not result:
        return "dropped"
    if len(result) == 1:
        return "changed" if result[0] is chunk else "replaced"
    return f"split into {len(result)}"


def copied(value: Any) -> Any:
    """A copy to compare with later: `deepcopy`, which, unlike a JSON round trip, cannot fail
    on what a repair accepts (an integer past 64 bits), so the watching never turns into the
    repair's failure."""
    return copy.deepcopy(value)


class AttributingChain(RepairChain):
    """`RepairChain` over watched links, keeping a `Step` per event it is handed."""

    def __init__(self, links: Sequence[Link], attribution: Attribution, *, strict: bool = False):
        self.attribution = attribution
        self._depth = 0
        self._current: Step | None = None
        self._adder = Label("?", {}, "added")
        super().__init__([_Watched(link, self) for link in links], strict=strict)

    @property
    def tally(self) -> Tally:
        return self.attribution.tally

    @property
    def steps(self) -> list[Step]:
        return self.attribution.steps

    @property
    def response(self) -> BodyChange | None:
        return self.attribution.response

    def snapshot(self) -> Counter[str]:
        return self.attribution.snapshot()

    def kinds_since(self, before: Counter[str]) -> dict[str, int]:
        return self.attribution.kinds_since(before)

    def attribute(
        self, repair: str, before: Counter[str], action: str, changes: Sequence[Change] = ()
    ) -> None:
        kinds = self.kinds_since(before)
        if (kinds or action) and self._current is not None:
            self._current.labels.append(Label(repair, kinds, action, list(changes)))

    def ending(self, repair: str, kinds: dict[str, int], added: bool) -> None:
        """`repair.on_end` returned: the events it added are handed to the chain next, and
        the first of them carries what it counted; without any, the kinds stand alone."""
        self._adder = Label(repair, kinds, "added")
        if kinds and not added:
            self.attribution.end_labels.append(Label(repair, kinds, "at end"))

    def on_chunk(
        self, chunk: Chunk, raw: bytes | None, start: int = 0
    ) -> list[tuple[Chunk, bytes | None]]:
        if self._depth:  # a repair's output on its way through the repairs after it
            return super().on_chunk(chunk, raw, start)
        step = Step(raw)
        if raw is None:  # a repair's closing event, added at stream end
            step.labels.append(self._adder)
            self._adder = Label(self._adder.repair, {}, "added")
        self.steps.append(step)
        self._current, self._depth = step, 1
        try:
            items = super().on_chunk(chunk, raw, start)
        finally:
            self._current, self._depth = None, 0
        # Encoded now, as the stream loop does next: a repair may still mutate what it kept.
        step.client = [out_raw if out_raw is not None else encode(out) for out, out_raw in items]
        step.pieces = list(items)
        return items

    async def on_response(self, body: dict[str, Any]) -> bool:
        """A non-streamed body goes through the links as a one-event stream: what they did to
        its event (and the events they added) is the body's, not rows of a stream."""
        response = self.attribution.response = BodyChange(copied(body))
        first = len(self.steps)
        changed = await super().on_response(body)
        trip, self.steps[first:] = self.steps[first:], []
        response.after = copied(body)
        # A link that rebuilt the event the same (a message's calls) changed nothing.
        labels = [label for step in trip for label in step.labels]
        response.labels = [label for label in labels if changed or label.kinds]
        return changed

    @property
    def end_labels(self) -> list[Label]:
        return self.attribution.end_labels

    def _absorb(self, link: Link) -> None:
        # The failing link's own name in the log, not the watcher's.
        super()._absorb(link.inner if isinstance(link, _Watched) else link)
