"""What `streamfix replay` and `explain` set aside when they compare a front's answer today with
the recorded one (fronts/responses/replay.py, fronts/messages/replay.py, fronts/minted.py): the
recording's heartbeats, and what each answer mints (ids, `created_at`, the receipt token naming
its turn), read as recorded. Two renderings of one answer by the real translators then compare
equal, and a changed answer still differs."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.fronts.messages import replay as messages_replay
from proxy.fronts.messages.events import MessageEvents
from proxy.fronts.minted import AsRecorded
from proxy.fronts.responses import replay as responses_replay
from proxy.fronts.responses.events import CLEAN, ResponsesEvents, whole
from proxy.fronts.responses.replay import MINTED, without_keepalives
from tests.fronts.responses.events_support import USAGE, call, delta, translation

SIGNED = {"google": {"thought_signature": "SIG"}}
CHUNKS = [
    delta(reasoning_content="think"),
    delta(content="calling"),
    delta(tool_calls=[call(0, "call_1", "f", '{"a":1}', extra_content=SIGNED)]),
    delta(finish="tool_calls", usage=USAGE),
]
REQUEST = {"model": "m", "input": "hi", "stream": True, "instructions": "be brief"}


def recorded_stream(
    keepalives: bool = False,
    chunks: list[dict[str, Any]] = CHUNKS,
    token: str = "sf1.tok",
    created_at: int = 1,
) -> bytes:
    """A Responses stream as the door renders it; every call mints new ids."""
    events = ResponsesEvents(translation(), REQUEST, token=token, created_at=created_at)
    out = events.start()
    if keepalives:
        out.append(events.keepalive())
    for chunk in chunks:
        out += events.feed(chunk)
        if keepalives:
            out += events.heartbeat()
    return b"".join(out + events.finish(CLEAN))


def as_recorded(recorded: bytes, today: bytes) -> bytes:
    return AsRecorded(recorded, today, MINTED)(today)


def test_keepalives_are_left_out_and_the_sequence_counted_again() -> None:
    plain = recorded_stream()
    with_keepalives = recorded_stream(keepalives=True)
    assert without_keepalives(plain) == plain

    def shape(body: bytes) -> list[tuple[str, int]]:
        lines = [line for line in body.split(b"\n") if line.startswith(b"data: ")]
        return [
            (e["type"], e["sequence_number"]) for e in map(orjson.loads, (x[6:] for x in lines))
        ]

    assert shape(without_keepalives(with_keepalives)) == shape(plain)


def test_two_renderings_of_one_stream_differ_only_in_what_they_minted() -> None:
    recorded = recorded_stream(created_at=1_700_000_000)
    today = recorded_stream(token="sf1.other", created_at=1_800_000_000)
    assert today != recorded
    assert as_recorded(recorded, today) == recorded
    assert b"1800000000" not in as_recorded(recorded, today)


def test_a_changed_answer_still_differs() -> None:
    recorded = recorded_stream()
    changed = [*CHUNKS[:2], delta(tool_calls=[call(0, "call_1", "f", '{"a":2}')]), CHUNKS[-1]]
    today = as_recorded(recorded, recorded_stream(chunks=changed))
    assert today != recorded
    assert b'{\\"a\\":2}' in today and b'{\\"a\\":1}' in recorded


def test_a_whole_response_reads_as_recorded() -> None:
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
    request = {**REQUEST, "stream": False}

    def body(created_at: int) -> bytes:
        events = ResponsesEvents(translation(), request, token="sf1.tok", created_at=created_at)
        return orjson.dumps(whole(events, completion))

    recorded, today = body(1), body(2)
    assert today != recorded and as_recorded(recorded, today) == recorded


def test_a_messages_answer_reads_as_recorded_without_its_pings() -> None:
    chunks = [delta(reasoning_content="think"), delta(content="hi"), delta(finish="stop")]

    def stream(signature: str, ping: bool) -> bytes:
        events = MessageEvents("m", mint=lambda key: signature)
        out = events.start()
        for chunk in chunks:
            out += events.feed(chunk)
            if ping:
                out.append(messages_replay.PING)
        return b"".join(out + events.finish(CLEAN))

    recorded = messages_replay.without_pings(stream("sf1.one", ping=True))
    today = stream("sf1.two", ping=False)
    assert today != recorded and messages_replay.PING not in recorded
    assert AsRecorded(recorded, today, messages_replay.MINTED)(today) == recorded


def test_each_front_recognises_only_its_own_answers() -> None:
    chat = b"data: " + orjson.dumps(CHUNKS[0]) + b"\n\ndata: [DONE]\n\n"
    responses = recorded_stream()
    message = b'{"id":"msg_1","type":"message","content":[]}'
    assert responses_replay.is_answer(responses)
    assert responses_replay.is_answer(b'{"id":"resp_1","object":"response"}')
    assert messages_replay.is_answer(message)
    for other in (chat, message, b"not json"):
        assert not responses_replay.is_answer(other)
    for other in (chat, responses, b"[]"):
        assert not messages_replay.is_answer(other)
