"""An event stream answering a request for ONE answer becomes one answer on every door (the
chat door included), with the same calls, names, arguments and finish the streamed path gives
for the same upstream stream through the same door.

Some gateways and local servers stream whatever `stream` says. The streams here are the ones
whose calls need repairing before a client can hold them, so an answer folded from the raw
stream, not the repaired one, shows: Vertex's jumping index (two calls, each with its own id,
whose deltas swap `index`), Gemini's indexless calls ending with `finish_reason: "stop"`, and
two parallel calls with proper indexes and interleaved fragments (the control: nothing to
repair but the fold itself).

Each test asks the same upstream stream of a door twice, streamed (`stream=True`, the answer
as the client accumulates it) and not (`stream=False`, the client's answer object), and holds
both to the calls the upstream meant and to each other.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.support.door_answers import CALLS_FINISH, answer_of_stream, answer_of_whole
from tests.support.door_clients import DOORS, Stage
from tests.support.scripted_chat_upstream import Script

WEATHER = ("get_weather", {"city": "Montevideo"})
RATE = ("get_exchange_rate", {"base": "USD", "quote": "UYU"})
USAGE = {"prompt_tokens": 95, "completion_tokens": 24, "total_tokens": 119}
DONE = b"data: [DONE]\n\n"


def sse(body: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"


def function(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# ── Vertex: two calls whose deltas swap `index` ──────────────────────────────


def vertex(choice: dict[str, Any], usage: dict[str, Any] | None = None) -> bytes:
    """Vertex's OpenAI-compatible chunk: `role` on every delta, no `finish_reason` key until
    the last chunk."""
    body = {
        "choices": [{**choice, "index": 0}],
        "created": 1774895600,
        "id": "9xHLaeCYGMq1nvgP6J3U0Q0",
        "model": "google/gemini-2.5-flash",
        "object": "chat.completion.chunk",
    }
    return sse(body | ({"usage": usage} if usage else {}))


def vertex_call(index: int, call_id: str, name: str, arguments: str) -> bytes:
    call = {**function(call_id, name, arguments), "index": index}
    return vertex({"delta": {"role": "assistant", "tool_calls": [call]}})


WEATHER_ID = "function-call-5d1c0a8e-weather"
RATE_ID = "function-call-9b7f2e41-rate"
VERTEX_JUMPING_INDEX = [
    # Each call repeats its id, type and name on every delta, while the index jumps: the
    # weather call's fragments come under 1 then 0, the rate call's under 0 then 1. Matched by
    # index, each call would get the other's tail.
    vertex_call(1, WEATHER_ID, "get_weather", '{"city":'),
    vertex_call(0, RATE_ID, "get_exchange_rate", '{"base":"USD",'),
    vertex_call(0, WEATHER_ID, "get_weather", '"Montevideo"}'),
    vertex_call(1, RATE_ID, "get_exchange_rate", '"quote":"UYU"}'),
    vertex({"delta": {"role": "assistant"}, "finish_reason": "tool_calls"}, USAGE),
    DONE,
]

VERTEX_JUMPING_INDEX_ONE_CHUNK = [
    # The same, both calls' fragments in each chunk.
    vertex(
        {
            "delta": {
                "role": "assistant",
                "tool_calls": [
                    {**function(WEATHER_ID, "get_weather", '{"city":'), "index": 1},
                    {**function(RATE_ID, "get_exchange_rate", '{"base":"USD",'), "index": 0},
                ],
            }
        }
    ),
    vertex(
        {
            "delta": {
                "role": "assistant",
                "tool_calls": [
                    {**function(WEATHER_ID, "get_weather", '"Montevideo"}'), "index": 0},
                    {**function(RATE_ID, "get_exchange_rate", '"quote":"UYU"}'), "index": 1},
                ],
            }
        }
    ),
    vertex({"delta": {"role": "assistant"}, "finish_reason": "tool_calls"}, USAGE),
    DONE,
]

# ── Gemini: calls without `index`, one per chunk, ending with "stop" ─────────


def gemini(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice: dict[str, Any] = {"delta": {"role": "assistant", **delta}, "index": 0}
    if finish is not None:
        choice["finish_reason"] = finish
    return sse(
        {
            "choices": [choice],
            "created": 1774895012,
            "id": "2IrLaYfNB5qS_uMPlPyRkQc",
            "model": "gemini-3-flash-preview",
            "object": "chat.completion.chunk",
            "usage": USAGE,
        }
    )


SIGNATURE = {"google": {"thought_signature": "CiQBcsjafGxAVt0yQ3lxo5ZRiw2xVZ9aB8mKq0f3UoQz"}}
GEMINI_INDEXLESS_STOP = [
    gemini(
        {
            "tool_calls": [
                {
                    **function("k2j9xq1m", "get_weather", '{"city":"Montevideo"}'),
                    "extra_content": SIGNATURE,
                }
            ]
        }
    ),
    gemini(
        {"tool_calls": [function("p8f3zt6c", "get_exchange_rate", '{"base":"USD","quote":"UYU"}')]}
    ),
    gemini({}, "stop"),  # Gemini's finish after calls
    DONE,
]

# ── OpenAI: two parallel calls, proper indexes, fragments interleaved ────────


def openai_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return sse(
        {
            "id": "chatcmpl-BqY1c9TgKf0HrZ2mLwQe8vXnD4sAp",
            "object": "chat.completion.chunk",
            "created": 1752131544,
            "model": "gpt-4.1-2025-04-14",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
    )


def fragment(index: int, arguments: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": arguments}}


PARALLEL_INDEXED = [
    openai_chunk(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {**function("call_5sQ8dJbM1LwQvX3zT0rK9nYp", "get_weather", ""), "index": 0}
            ],
        }
    ),
    openai_chunk({"tool_calls": [fragment(0, '{"city": ')]}),
    openai_chunk(
        {
            "tool_calls": [
                {**function("call_Ht2GfE7aR4cW9mZ1xV6bN3uL", "get_exchange_rate", ""), "index": 1}
            ]
        }
    ),
    openai_chunk({"tool_calls": [fragment(1, '{"base": "USD", ')]}),
    openai_chunk({"tool_calls": [fragment(0, '"Montevideo"}'), fragment(1, '"quote": "UYU"}')]}),
    openai_chunk({}, "tool_calls"),
    DONE,
]

STREAMS = {
    "vertex-jumping-index": VERTEX_JUMPING_INDEX,
    "vertex-jumping-index-one-chunk": VERTEX_JUMPING_INDEX_ONE_CHUNK,
    "gemini-indexless-stop": GEMINI_INDEXLESS_STOP,
    "parallel-indexed": PARALLEL_INDEXED,
}


@pytest.mark.parametrize("stream", sorted(STREAMS))
@pytest.mark.parametrize("door", DOORS)
def test_one_answer_of_an_event_stream_is_the_streamed_answer(
    stage: Stage, door: str, stream: str
) -> None:
    script = Script(STREAMS[stream])
    streamed = answer_of_stream(stage.streamed(door, script))
    folded = answer_of_whole(stage.whole(door, script))
    # The streamed path first: the calls the upstream meant, in order, finished as calls.
    assert streamed.named_calls == [WEATHER, RATE]
    assert streamed.finish == CALLS_FINISH[door]
    # The one answer: the same calls (ids included), names, arguments, text and finish.
    assert folded.named_calls == [WEATHER, RATE]
    assert folded == streamed
