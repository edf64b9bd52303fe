"""Replaying one cassette through today's repairs with an attributing chain, and pairing each
upstream event with what the client was sent for it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from proxy.explain.attribution import AttributingPhases, Attribution, BodyChange, Label, Step
from proxy.explain.front import FrontView, front_view
from proxy.repair.pipeline import as_chunk, is_done, is_upstream_error
from proxy.repair.repairs import ChainOptions
from proxy.replay_check import delivery_of, replayed, settings_for
from proxy.server.delivery_mode import Mode
from proxy.settings.schema import Settings
from proxy.store.protocol import Store
from proxy.upstream.body_decoding import decoder_for
from proxy.upstream.cassettes import Cassette
from proxy.wire.sse import DONE, SSEDecoder, SSEEvent


class Unreadable(Exception):
    """A path that is not a cassette, or a directory without any."""


@dataclass
class Row:
    """One upstream event (None: added by the proxy) and the client events sent for it."""

    upstream: bytes | None
    client: list[bytes]
    labels: list[Label] = field(default_factory=list)


@dataclass
class Explanation:
    name: str
    status: int
    mode: str
    """`stream` (events repaired), `json` (a body repaired) or `relayed` (passed as is)."""
    request: BodyChange | None = None
    response: BodyChange | None = None
    rows: list[Row] = field(default_factory=list)
    relayed: bytes = b""
    """The client's body when it was relayed rather than repaired."""
    notes: list[Label] = field(default_factory=list)
    """Changes tied to no one event: what repairs counted at stream end without adding an
    event, and what the stream loop or the proxy counted (`pipeline`)."""
    totals: dict[str, int] = field(default_factory=dict)
    accounted: bool = True
    """Whether the rows' client events are, byte for byte, what the client was sent."""
    front: FrontView | None = None
    """A Responses or Messages client's side of the exchange (front.py); None for a chat
    client's."""


def cassette_paths(target: Path) -> list[Path]:
    if target.is_dir():
        paths = sorted(target.glob("*.json"))
        if not paths:
            raise Unreadable(f"{target}: no cassettes (*.json) in this directory")
        return paths
    if not target.is_file():
        raise Unreadable(f"{target}: no such file or directory")
    return [target]


def load(path: Path) -> Cassette:
    try:
        return Cassette.load(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise Unreadable(f"{path}: not a readable cassette ({exc})") from exc


EXPLAIN_TENANT = "streamfix-explain"
"""The credential explain presents: never sent anywhere (the upstream is the cassette)."""


async def explain(path: Path, settings: Settings) -> Explanation:
    cassette = load(path)
    built: list[AttributingPhases] = []

    def attributing(options: ChainOptions, store: Store) -> AttributingPhases:
        phases = AttributingPhases(options, store)
        built.append(phases)
        return phases

    # A made-up tenant, so the receipt repairs show what they would capture and strip.
    settings = settings_for(cassette, settings)
    response = await replayed(cassette, settings, attributing, credential=EXPLAIN_TENANT)
    attributions = built[0].attributions if built else []
    seen = attributions[0] if attributions else None
    result = Explanation(path.name, response.status_code, _mode(cassette, response, seen))
    if seen is None:  # refused before any repair ran
        result.relayed = response.content
        return result
    result.request, result.response = seen.request, seen.response
    if result.mode == "stream":
        result.rows = _rows(_upstream_events(cassette), seen.steps, response.content)
        result.accounted = _sent(result.rows) == response.content
    elif result.mode == "relayed":
        result.relayed = response.content
    _total(result, seen)
    sent = [row.client for row in result.rows]
    result.front = front_view(cassette, result.mode, sent, response.content)
    if result.front is not None:
        # What the front counted, as the exchange's tally holds it beside the repairs'.
        totals = Counter(result.totals)
        totals.update(result.front.translation)
        totals.update(result.front.counts)
        result.totals = dict(sorted(totals.items()))
    return result


def _mode(cassette: Cassette, response: httpx.Response, seen: Attribution | None) -> str:
    """How the proxy answered: the app's own decision (server/delivery_mode.py)."""
    if seen is None:  # refused, or a path no repair reads
        return Mode.RELAY.value
    mode = delivery_of(cassette, response)
    if mode is Mode.JSON and seen.response is None:
        return Mode.RELAY.value  # not a JSON object: passed on as received
    return mode.value


def _upstream_events(cassette: Cassette) -> list[tuple[SSEEvent, Label | None]]:
    """The upstream's events as the stream loop decodes them, each with what the decoding
    changed in its framing (an event cut off a single-newline stream, a blank line added)."""
    # Undecodable bodies are relayed (never here); identity otherwise keeps the types simple.
    decoder = decoder_for(cassette.response_headers.get("content-encoding", "")) or decoder_for("")
    assert decoder is not None
    pieces = [b"".join(decoder.decode(chunk.data)) for chunk in cassette.chunks]
    pieces.append(decoder.flush())
    body = b"".join(pieces)
    sse = SSEDecoder()
    events = [event for piece in pieces for event in sse.feed(piece)] + sse.flush()
    out: list[tuple[SSEEvent, Label | None]] = []
    offset = 0
    for event in events:
        if body.startswith(event.raw, offset):
            offset += len(event.raw)
            out.append((event, None))
            continue
        # The decoder terminated the event: find how much of it the upstream sent.
        offset += next(
            n for n in range(len(event.raw), -1, -1) if body.startswith(event.raw[:n], offset)
        )
        last = event is events[-1]
        kinds = {} if last else {"events_split": 1}
        out.append((event, Label("pipeline", kinds, "blank line added" if last else "split")))
    return out


def _rows(
    events: list[tuple[SSEEvent, Label | None]], steps: list[Step], client: bytes
) -> list[Row]:
    """Upstream events in order: those the chain was handed get its step; the rest passed as
    they were, except `[DONE]`, which the stream loop sends once, after the closing events,
    and only when the upstream ended cleanly (after an in-band error, everything passes)."""
    from_upstream = [step for step in steps if step.upstream is not None]
    added = [step for step in steps if step.upstream is None]
    rows: list[Row] = []
    done: Row | None = None
    errored = False
    position = 0
    for event, framing in events:
        labels = [framing] if framing else []
        if errored:
            rows.append(Row(event.raw, [event.raw], labels))
        elif position < len(from_upstream) and from_upstream[position].upstream == event.raw:
            step = from_upstream[position]
            position += 1
            rows.append(Row(event.raw, step.client, labels + step.labels))
        elif is_upstream_error(event, as_chunk(event)):
            errored = True
            ends = Label("pipeline", {"upstream_error_event": 1}, "relayed; repairs end here")
            rows.append(Row(event.raw, [event.raw], [*labels, ends]))
        elif is_done(event):
            if done is None:
                done = Row(event.raw, [], labels)
            else:
                rows.append(Row(event.raw, [], [*labels, Label("pipeline", {}, "dropped")]))
        else:
            rows.append(Row(event.raw, [event.raw], labels))
    rows += [Row(None, step.client, step.labels) for step in added]
    if client.endswith(DONE) and not _sent(rows).endswith(DONE):
        if done is None:
            done = Row(None, [], [Label("pipeline", {"done_added": 1}, "added")])
        done.client = [DONE]
    if done is not None:
        rows.append(done)
    return rows


def _sent(rows: list[Row]) -> bytes:
    return b"".join(b"".join(row.client) for row in rows)


def _total(result: Explanation, seen: Attribution) -> None:
    """Totals by kind; what no label accounts for is the pipeline's or the proxy's own."""
    labels = [label for row in result.rows for label in row.labels] + seen.end_labels
    for body in (result.request, result.response):
        if body is not None:
            labels += body.labels
    attributed: Counter[str] = Counter()
    for label in labels:
        attributed.update(label.kinds)
    counted = Counter(seen.tally.repairs)
    # Kinds only explain names (`done_added`) count where it saw them; the rest as booked.
    totals = counted | attributed
    rest = dict(totals - attributed)
    result.notes = list(seen.end_labels)
    if rest:
        result.notes.append(Label("pipeline", rest, ""))
    result.totals = dict(sorted(totals.items()))
