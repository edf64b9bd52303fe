"""Replaying one cassette as it was served, through the door its client spoke to, on phases
that attribute each change to its repair and a machine that records what it did with each
upstream event (phases.py); the rows are read off that record (rows.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from proxy.explain.answer_record import AnswerRecord
from proxy.explain.attribution import Attribution, BodyChange, Label
from proxy.explain.front import FrontView, front_view
from proxy.explain.phases import AttributingPhases
from proxy.explain.rows import Row, chat_rows, end_words
from proxy.repair.repairs import ChainOptions
from proxy.replay_check import chat_request, door_request, front_of, replayed, settings_for
from proxy.server.delivery_mode import Mode
from proxy.settings.schema import Settings
from proxy.store.protocol import Store
from proxy.upstream.body_decoding import decoder_for
from proxy.upstream.cassettes import Cassette


class Unreadable(Exception):
    """A path that is not a cassette, or a directory without any."""


@dataclass
class Explanation:
    name: str
    status: int
    mode: str
    """`stream` (events repaired), `json` (a body repaired), `folded` (a stream folded into
    one body), `relayed` (passed as is) or `refused` (answered with the front's error)."""
    request: BodyChange | None = None
    response: BodyChange | None = None
    rows: list[Row] = field(default_factory=list)
    relayed: bytes = b""
    """The client's body when it was relayed or refused rather than repaired."""
    end: str = ""
    """How the answer ended, as the machine decided: `clean`, `upstream error`,
    `truncated`, `no events`, `not an answer`; empty when no answer went through it."""
    end_detail: str = ""
    notes: list[Label] = field(default_factory=list)
    """Changes tied to no one event: what repairs counted at stream end without adding an
    event, and what the stream loop or the proxy counted (`pipeline`)."""
    totals: dict[str, int] = field(default_factory=dict)
    accounted: bool = True
    """Whether the rows' client events are, byte for byte, what the client was sent (for a
    front's client: what its door was handed, event by event)."""
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
    front = front_of(cassette)
    through_front = front is not None and cassette.client_request is not None
    built: list[AttributingPhases] = []

    def attributing(options: ChainOptions, store: Store) -> AttributingPhases:
        phases = AttributingPhases(options, store)
        built.append(phases)
        return phases

    # A made-up tenant, so the receipt repairs show what they would capture and strip.
    request = door_request(cassette) if through_front else chat_request(cassette)
    settings = settings_for(cassette, settings)
    response = await replayed(
        cassette, settings, attributing, credential=EXPLAIN_TENANT, request=request
    )
    phases = built[0] if built else None
    seen = phases.attributions[0] if phases is not None and phases.attributions else None
    record = phases.answer_of(seen) if phases is not None and seen is not None else None
    result = Explanation(path.name, response.status_code, _mode(record, seen, through_front))
    if seen is not None:
        result.request, result.response = seen.request, seen.response
    if record is not None:
        result.end, result.end_detail = end_words(record.end, record.mode != Mode.JSON.value)
        if result.mode == Mode.SSE.value:
            result.rows = chat_rows(record, _upstream_body(cassette), not through_front)
            sent = b"".join(b"".join(row.client) for row in result.rows)
            result.accounted = record.in_step and (through_front or sent == response.content)
    if result.mode in (Mode.RELAY.value, Mode.REFUSED.value):
        result.relayed = response.content
    if front is not None:
        replay = response if through_front else None
        result.front = front_view(cassette, front, result.rows, record, replay)
        result.front.translated = seen.translation if seen is not None else {}
    if seen is not None:
        _total(result, seen)
    return result


def _mode(record: AnswerRecord | None, seen: Attribution | None, through_front: bool) -> str:
    """How the proxy answered, as its answer machine was driven."""
    if record is None:  # a refusal, or a path no repair reads
        return Mode.REFUSED.value if through_front else Mode.RELAY.value
    unread = seen is not None and seen.response is None
    if record.mode == Mode.JSON.value and unread and not through_front:
        return Mode.RELAY.value  # not a completion: passed on as received
    return record.mode


def _upstream_body(cassette: Cassette) -> bytes:
    """The upstream's body as the machine read it, decoded."""
    # Undecodable bodies are refused (never here); identity otherwise keeps the types simple.
    decoder = decoder_for(cassette.response_headers.get("content-encoding", "")) or decoder_for("")
    assert decoder is not None
    pieces = [b"".join(decoder.decode(chunk.data)) for chunk in cassette.chunks]
    pieces.append(decoder.flush())
    return b"".join(pieces)


def _total(result: Explanation, seen: Attribution) -> None:
    """Totals by kind; what no label accounts for is the pipeline's or the proxy's own."""
    labels = [label for row in result.rows for label in row.labels] + seen.end_labels
    for body in (result.request, result.response):
        if body is not None:
            labels += body.labels
    if result.front is not None:
        labels += result.front.translation_labels + result.front.events_labels
    attributed: Counter[str] = Counter()
    for label in labels:
        attributed.update(label.kinds)
    counted = Counter(seen.tally.repairs)
    # Kinds only explain names count where it saw them; the rest as booked.
    totals = counted | attributed
    rest = dict(totals - attributed)
    result.notes = list(seen.end_labels)
    if rest:
        result.notes.append(Label("pipeline", rest, ""))
    result.totals = dict(sorted(totals.items()))
