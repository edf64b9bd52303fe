"""One key, `[server] keepalive_seconds`, keeps every door's stream alive while the upstream is
silent mid-answer, each in the door's own form: an SSE comment (`: keepalive`) on chat,
`response.in_progress` on Responses, `ping` on Messages. The real client still reads the whole
answer through them; with the key at 0 none is sent.

The upstream sends the answer's first words, stays silent for five intervals, then sends the
rest. Counted are the heartbeats between the first words and the next (the Responses stream's
own `response.in_progress` after `response.created` opens every stream and is not one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.support.door_answers import RawEvent, answer_of_stream, raw_events
from tests.support.door_clients import DOORS, Stage, serving_proxy
from tests.support.scripted_chat_upstream import Script, ScriptedChatUpstream

INTERVAL = 0.2
SILENCE = 5 * INTERVAL
ENVELOPE = {"id": "chatcmpl-beat", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + orjson.dumps({**ENVELOPE, "choices": [choice]}) + b"\n\n"


SILENT_MID_ANSWER = Script(
    [
        event({"role": "assistant", "content": "Thinking it over: "}),
        SILENCE,
        event({"content": "sunny in Montevideo."}),
        event({}, "stop"),
        b"data: [DONE]\n\n",
    ]
)
ANSWER = "Thinking it over: sunny in Montevideo."
FINISH = {"chat": "stop", "responses": "completed", "messages": "end_turn"}


@pytest.fixture(scope="module")
def beating(scripted_upstream: ScriptedChatUpstream) -> Iterator[Stage]:
    with serving_proxy(scripted_upstream.url, **{"server.keepalive_seconds": INTERVAL}) as url:
        yield Stage(scripted_upstream, url)


@pytest.fixture(scope="module")
def quiet(scripted_upstream: ScriptedChatUpstream) -> Iterator[Stage]:
    with serving_proxy(scripted_upstream.url, **{"server.keepalive_seconds": 0}) as url:
        yield Stage(scripted_upstream, url)


def is_heartbeat(door: str, event: RawEvent) -> bool:
    if door == "chat":
        return event.comment == "keepalive"
    if event.data is None:
        return False
    kind = orjson.loads(event.data).get("type")
    return kind == ("response.in_progress" if door == "responses" else "ping")


def says(event: RawEvent, text: str) -> bool:
    return event.data is not None and text in event.data


def heartbeats(door: str, raw: bytes) -> tuple[int, int]:
    """(heartbeats in the silence, heartbeats anywhere else after the stream opened)."""
    events = raw_events(raw)
    first = next(i for i, e in enumerate(events) if says(e, "Thinking it over"))
    second = next(i for i, e in enumerate(events) if says(e, "sunny in Montevideo"))
    within = sum(is_heartbeat(door, e) for e in events[first:second])
    opening = 1 if door == "responses" else 0  # `response.in_progress` after `.created`
    elsewhere = sum(is_heartbeat(door, e) for e in events[:first] + events[second:]) - opening
    return within, elsewhere


def comment_lines(raw: bytes) -> list[int]:
    """Where the stream's comment lines (`:` first on a line) start."""
    return [i for i in range(len(raw)) if raw[i : i + 1] == b":" and (i == 0 or raw[i - 1] == 10)]


def between_whole_events(raw: bytes) -> bool:
    """Every comment starts the stream or follows an event's closing blank line."""
    return all(at == 0 or raw[:at].endswith(b"\n\n") for at in comment_lines(raw))


@pytest.mark.parametrize("door", DOORS)
def test_a_silent_upstream_gets_the_doors_heartbeat_and_the_client_reads_the_whole_answer(
    beating: Stage, door: str
) -> None:
    result = beating.streamed(door, SILENT_MID_ANSWER)
    answer = answer_of_stream(result)
    assert (answer.text, answer.finish) == (ANSWER, FINISH[door])
    for raw in (result.read, result.raw):  # what the client read, and a plain read
        within, elsewhere = heartbeats(door, raw)
        assert 2 <= within <= 6, (within, raw)  # about one per interval of the silence
        assert elsewhere == 0, raw  # none before the answer began, none after its last word
        assert between_whole_events(raw)
    if door == "responses":  # openai-python hands the heartbeats on as events
        kinds = [item.type for item in result.items]
        assert kinds.count("response.in_progress") >= 3, kinds


@pytest.mark.parametrize("door", DOORS)
def test_no_heartbeat_when_the_key_is_zero(quiet: Stage, door: str) -> None:
    result = quiet.streamed(door, SILENT_MID_ANSWER)
    answer = answer_of_stream(result)
    assert (answer.text, answer.finish) == (ANSWER, FINISH[door])
    assert heartbeats(door, result.raw) == (0, 0)
    assert comment_lines(result.raw) == []
