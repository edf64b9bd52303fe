"""`streamfix replay` on a Responses cassette (proxy/fronts/responses/replay.py): the chat
answer rendered as the front rendered it, with what the recorded answer minted (response and
item ids, `created_at`, the token) and without the recording's keepalives."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.fronts.responses.events import CLEAN, ResponsesEvents, whole
from proxy.fronts.responses.replay import rendered, without_keepalives
from tests.fronts.responses.events_support import USAGE, call, delta, translation

SIGNED = {"google": {"thought_signature": "SIG"}}
CHUNKS = [
    delta(reasoning_content="think"),
    delta(content="calling"),
    delta(tool_calls=[call(0, "call_1", "f", '{"a":1}', extra_content=SIGNED)]),
    delta(finish="tool_calls", usage=USAGE),
]
REQUEST = {"model": "m", "input": "hi", "stream": True, "instructions": "be brief"}


def sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def recorded_stream(keepalives: bool) -> bytes:
    events = ResponsesEvents(translation(), REQUEST, token="sf1.tok")
    out = events.start()
    if keepalives:
        out.append(events.keepalive())
    for chunk in CHUNKS:
        out += events.feed(chunk)
        if keepalives:
            out += events.heartbeat()
    return b"".join(out + events.finish(CLEAN))


def test_a_stream_renders_as_recorded() -> None:
    recorded = recorded_stream(keepalives=False)
    assert rendered(recorded, sse(CHUNKS), {}) == recorded


def test_keepalives_are_left_out_and_the_sequence_counted_again() -> None:
    plain = recorded_stream(keepalives=False)
    with_keepalives = recorded_stream(keepalives=True)
    assert with_keepalives != plain
    assert rendered(with_keepalives, sse(CHUNKS), {}) == without_keepalives(with_keepalives)

    # Ids are minted per answer: the two recordings share none, so compare the shapes.
    def shape(body: bytes) -> list[tuple[str, int]]:
        lines = [line for line in body.split(b"\n") if line.startswith(b"data: ")]
        return [
            (e["type"], e["sequence_number"]) for e in map(orjson.loads, (x[6:] for x in lines))
        ]

    assert shape(without_keepalives(with_keepalives)) == shape(plain)


def test_a_changed_repair_shows_as_a_difference() -> None:
    recorded = recorded_stream(keepalives=False)
    today = [*CHUNKS[:2], delta(tool_calls=[call(0, "call_1", "f", '{"a":2}')]), CHUNKS[-1]]
    assert rendered(recorded, sse(today), {}) != recorded


def test_a_whole_response_renders_as_recorded() -> None:
    completion = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hi", "reasoning_content": "r"},
            }
        ],
        "usage": USAGE,
    }
    events = ResponsesEvents(translation(), {**REQUEST, "stream": False}, token="sf1.tok")
    recorded = orjson.dumps(whole(events, completion))
    assert rendered(recorded, orjson.dumps(completion), {}) == recorded


def test_other_answers_are_not_responses() -> None:
    chat = sse(CHUNKS)
    assert rendered(chat, chat, {}) is None
    assert rendered(b'{"type":"message"}', chat, {}) is None
