"""A repair chain that says which repair made each change: used by `streamfix explain` only.

Every repair books what it changes on the exchange (`Exchange.count`). Around each hook call
this chain snapshots `exchange.repairs`, so the kinds counted while repair R handled an event
are R's, and it notes what the hook did to the stream (dropped, replaced, split, added). The
production chain (`RepairChain`) is untouched: its hot loop pays nothing for this.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.explain.diff import Change, change_json, closest_changes, field_changes
from proxy.repair.exchange import Exchange
from proxy.repair.pipeline import Chunk, Repair, RepairChain
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


@dataclass
class BodyChange:
    """A request or non-streamed response body, before and after the repairs."""

    before: Any
    after: Any = None
    labels: list[Label] = field(default_factory=list)


class _Watched(Repair):
    """Runs one repair's hooks and reports each call to the chain."""

    def __init__(self, repair: Repair, chain: AttributingChain) -> None:
        self.inner = repair
        self.name = type(repair).__name__
        self._chain = chain

    def wants_chunks(self) -> bool:
        return self.inner.wants_chunks()

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        before, original = self._chain.snapshot(), _copy(chunk)  # before the repair mutates it
        try:
            result = self.inner.on_chunk(chunk)
        except Exception as exc:
            self._chain.attribute(self.name, before, f"failed: {type(exc).__name__}")
            raise
        if result is None:
            self._chain.attribute(self.name, before, "")
        else:
            # Copied now: the repairs after this one may still change what it passed on.
            changes = closest_changes(original, [_copy(out) for out in result])
            self._chain.attribute(self.name, before, _stream_action(chunk, result), changes)
        return result

    async def on_end(self) -> list[Chunk]:
        before = self._chain.snapshot()
        added = await self.inner.on_end()
        self._chain.ending(self.name, self._chain.kinds_since(before), bool(added))
        return added

    async def on_request(self, body: dict[str, Any]) -> bool:
        return await self._on_body(self.inner.on_request, body)

    async def _on_body(
        self, hook: Callable[[dict[str, Any]], Awaitable[bool]], body: dict[str, Any]
    ) -> bool:
        before, original = self._chain.snapshot(), _copy(body)
        try:
            changed = await hook(body)
        except Exception as exc:
            label = Label(
                self.name, self._chain.kinds_since(before), f"failed: {type(exc).__name__}"
            )
            self._chain.body_labels.append(label)
            raise
        kinds = self._chain.kinds_since(before)
        changes = field_changes(original, _copy(body))
        if changed or kinds or changes:
            label = Label(self.name, kinds, "changed" if changed else "", changes)
            self._chain.body_labels.append(label)
        return changed


def _stream_action(chunk: Chunk, result: list[Chunk]) -> str:
    if not result:
        return "dropped"
    if len(result) == 1:
        return "changed" if result[0] is chunk else "replaced"
    return f"split into {len(result)}"


def _copy(value: Any) -> Any:
    """A copy to compare with later: `deepcopy`, which, unlike a JSON round trip, cannot fail
    on what a repair accepts (an integer past 64 bits), so the watching never turns into the
    repair's failure."""
    return copy.deepcopy(value)


class AttributingChain(RepairChain):
    """`RepairChain` over watched repairs, keeping a `Step` per event it is handed."""

    def __init__(self, repairs: Sequence[Repair], exchange: Exchange, *, strict: bool = False):
        self.exchange = exchange
        self.steps: list[Step] = []
        self.body_labels: list[Label] = []
        self.request: BodyChange | None = None
        self.response: BodyChange | None = None
        self._depth = 0
        self._current: Step | None = None
        self._end_labels: list[Label] = []
        self._adder = Label("?", {}, "added")
        super().__init__([_Watched(repair, self) for repair in repairs], strict=strict)

    def snapshot(self) -> Counter[str]:
        return Counter(self.exchange.repairs)

    def kinds_since(self, before: Counter[str]) -> dict[str, int]:
        return dict(self.exchange.repairs - before)

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
            self._end_labels.append(Label(repair, kinds, "at end"))

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
        return items

    async def on_request(self, body: dict[str, Any]) -> bool:
        self.request, self.body_labels = BodyChange(_copy(body)), []
        changed = await super().on_request(body)
        self.request.after, self.request.labels = _copy(body), self.body_labels
        return changed

    async def on_response(self, body: dict[str, Any]) -> bool:
        """A non-streamed body goes through the links as a one-event stream: what they did to
        its event (and the events they added) is the body's, not rows of a stream."""
        self.response = BodyChange(_copy(body))
        first = len(self.steps)
        changed = await super().on_response(body)
        trip, self.steps[first:] = self.steps[first:], []
        self.response.after = _copy(body)
        # A link that rebuilt the event the same (a message's calls) changed nothing.
        labels = [label for step in trip for label in step.labels]
        self.response.labels = [label for label in labels if changed or label.kinds]
        return changed

    @property
    def end_labels(self) -> list[Label]:
        """Kinds counted by `on_end` hooks (a store write, a summary), not tied to an event."""
        return self._end_labels

    def _absorb(self, repair: Repair) -> None:
        # The failing repair's own name in the log, not the watcher's.
        super()._absorb(repair.inner if isinstance(repair, _Watched) else repair)
