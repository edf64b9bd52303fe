"""How an answer ends, the same through the three doors (chat completions, Responses, Messages),
with each door's real client on the proxy under uvicorn, in front of a scripted upstream.

An answer that did not end is an error in the door's own shape, never a clean end: a 200 event
stream with no event in it (an empty body, or only SSE comments), a stream cut before its finish
(closed cleanly without a finish or `[DONE]`, or dropped mid-event), and an upstream's own error
event mid-stream (OpenRouter's chunk with a top-level `error`, Groq's `event: error`), which
reaches the client with the upstream's words. Streamed, the client gets the door's error event
and nothing that says the answer ended well (no `[DONE]` or finish reason on chat, no
`response.completed`, no `message_stop`: checked on the raw bytes as well as by the client);
asked for one answer of an upstream that streamed anyway, a 502 in the door's error shape.

Every test reads: an upstream script, a door, what the door's client must see.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.support.door_answers import (
    answer_of_stream,
    answer_of_whole,
    stream_error_text,
    whole_error_text,
)
from tests.support.door_clients import DOORS, Stage
from tests.support.fake_upstream import load_transcript
from tests.support.scripted_chat_upstream import CUT, Script, Step

ENVELOPE = {"id": "chatcmpl-door", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + orjson.dumps({**ENVELOPE, "choices": [choice]}) + b"\n\n"


TEXT = [
    event({"role": "assistant", "content": "It is "}),
    event({"content": "sunny in "}),
    event({"content": "Montevideo"}),
]
DONE = b"data: [DONE]\n\n"
COMMENT = b": OPENROUTER PROCESSING\n\n"

NO_EVENT: dict[str, list[Step]] = {
    "empty-body": [],
    "only-comments": [COMMENT, COMMENT],
}
CUT_SHORT: dict[str, list[Step]] = {
    # The upstream ends its body properly, but the answer never finished.
    "closed-without-finish-or-done": TEXT,
    # The connection drops with half an event sent, and after whole events.
    "dropped-mid-event": [*TEXT, event({"content": " today"})[:30], CUT],
    "dropped-between-events": [*TEXT, CUT],
}

GROQ = "groq_event_error_midstream"
OPENROUTER = "openrouter_error_chunk_midstream"
UPSTREAM_ERRORS = {
    # name: (the transcript, what the upstream sent after its error event)
    "groq-event-error": (GROQ, b""),
    "openrouter-error-chunk": (OPENROUTER, DONE),
}


def upstream_error(name: str) -> tuple[Script, bytes, str]:
    transcript, tail = UPSTREAM_ERRORS[name]
    loaded = load_transcript(transcript)
    message = loaded.meta["expect"]["error"]["message"]
    return Script(loaded.events), tail, message


# ── a 200 stream with no event in it ─────────────────────────────────────────


@pytest.mark.parametrize("body", sorted(NO_EVENT))
@pytest.mark.parametrize("door", DOORS)
def test_a_stream_with_no_event_is_the_doors_error_event(
    stage: Stage, door: str, body: str
) -> None:
    result = stage.streamed(door, Script(NO_EVENT[body]))
    assert stream_error_text(result)


@pytest.mark.parametrize("body", sorted(NO_EVENT))
@pytest.mark.parametrize("door", DOORS)
def test_one_answer_asked_of_a_stream_with_no_event_is_the_doors_502(
    stage: Stage, door: str, body: str
) -> None:
    result = stage.whole(door, Script(NO_EVENT[body]))
    assert whole_error_text(result, 502)


# ── a stream cut before its finish ───────────────────────────────────────────


@pytest.mark.parametrize("cut", sorted(CUT_SHORT))
@pytest.mark.parametrize("door", DOORS)
def test_a_stream_cut_before_its_finish_is_the_doors_error_event(
    stage: Stage, door: str, cut: str
) -> None:
    result = stage.streamed(door, Script(CUT_SHORT[cut]))
    assert stream_error_text(result)


@pytest.mark.parametrize("cut", sorted(CUT_SHORT))
@pytest.mark.parametrize("door", DOORS)
def test_one_answer_asked_of_a_stream_cut_before_its_finish_is_the_doors_502(
    stage: Stage, door: str, cut: str
) -> None:
    result = stage.whole(door, Script(CUT_SHORT[cut]))
    assert whole_error_text(result, 502)


@pytest.mark.parametrize("door", DOORS)
def test_a_finished_stream_without_done_still_ends_cleanly(stage: Stage, door: str) -> None:
    # The other side of the cut: the finish came, only `[DONE]` is missing (OpenAI-compatible
    # servers that close after the finish chunk). That is a whole answer, on every door, and
    # the same streamed and not.
    script = Script([*TEXT, event({}, "stop")])
    streamed = answer_of_stream(stage.streamed(door, script))
    folded = answer_of_whole(stage.whole(door, script))
    assert streamed.text == folded.text == "It is sunny in Montevideo"
    assert streamed == folded
    assert (
        streamed.finish == {"chat": "stop", "responses": "completed", "messages": "end_turn"}[door]
    )


# ── the upstream's own error event mid-stream ────────────────────────────────


@pytest.mark.parametrize("case", sorted(UPSTREAM_ERRORS))
@pytest.mark.parametrize("door", DOORS)
def test_an_upstream_error_event_is_the_doors_error_with_its_words(
    stage: Stage, door: str, case: str
) -> None:
    script, tail, message = upstream_error(case)
    # Chat relays the upstream's events as received, so what it sent after its error follows.
    result = stage.streamed(door, script)
    assert message in stream_error_text(result, tail if door == "chat" else b"")


@pytest.mark.parametrize("case", sorted(UPSTREAM_ERRORS))
@pytest.mark.parametrize("door", DOORS)
def test_one_answer_asked_of_a_stream_with_an_upstream_error_is_the_doors_502_with_its_words(
    stage: Stage, door: str, case: str
) -> None:
    script, _, message = upstream_error(case)
    result = stage.whole(door, script)
    assert message in whole_error_text(result, 502)
