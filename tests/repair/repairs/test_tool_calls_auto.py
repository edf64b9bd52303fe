"""Auto emission (the default): a call streamed as OpenAI streams it, that no fix could change,
goes on as the bytes received; anything a fix may need is held, as atomic emission holds it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.repair.conformance import stream_chunks, violations
from proxy.repair.tally import Tally
from tests.support.openai_streams import (
    WEATHER_TOOL,
    WRITE_TOOL,
    call_stream,
    fragments_of,
    text_stream,
)
from tests.support.streams import assembled_calls, repair_stream, sse

REQUEST = {"messages": [{"role": "user", "content": "go"}], "tools": [WEATHER_TOOL, WRITE_TOOL]}
BIG_ARGUMENTS = orjson.dumps({"path": "notes.md", "content": "x" * 2000}).decode()

OPENAI_SHAPES = {
    "text": text_stream(["Hel", "lo", " there."]),
    "text_with_usage": text_stream(["Hi"], usage=True),
    "one_call": call_stream([("call_a1", "get_weather", ['{"ci', 'ty": "Pa', 'ris"}'])]),
    "one_big_call": call_stream([("call_b2", "write_file", fragments_of(BIG_ARGUMENTS, 7))]),
    "parallel_calls": call_stream(
        [
            ("call_p1", "get_weather", ['{"city":', ' "Paris"}']),
            ("call_p2", "get_weather", ['{"city":', ' "Tokyo"}']),
            ("call_p3", "write_file", ['{"path": "a", ', '"content": "b"}']),
        ],
        usage=True,
    ),
    "no_parameters": call_stream([("call_n1", "get_weather", ["{}"])]),
}


@pytest.mark.parametrize("name", sorted(OPENAI_SHAPES))
def test_openai_shaped_streams_pass_byte_for_byte(name: str) -> None:
    body = OPENAI_SHAPES[name]
    assert repair_stream(body, REQUEST, emit="auto") == body


def test_atomic_still_holds_an_openai_shaped_call_when_asked() -> None:
    body = OPENAI_SHAPES["one_call"]
    out = repair_stream(body, REQUEST, emit="atomic")
    assert out != body
    assert violations(out, "atomic") == []
    assert assembled_calls(out) == assembled_calls(body)


def entries_sent(body: bytes) -> list[dict[str, Any]]:
    return [
        entry
        for item in stream_chunks(body)
        if isinstance(item, dict)
        for choice in item.get("choices") or ()
        for entry in (choice.get("delta") or {}).get("tool_calls") or ()
    ]


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def opening(index: int, call_id: str | None, name: str | None, arguments: str = "") -> dict:
    entry: dict[str, Any] = {"index": index, "type": "function"}
    if call_id is not None:
        entry["id"] = call_id
    entry["function"] = {"arguments": arguments, **({"name": name} if name else {})}
    return entry


def fragment(index: int, text: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": text}}


def test_a_call_without_an_id_is_held_and_sent_whole() -> None:
    body = sse(
        chunk({"role": "assistant", "tool_calls": [opening(0, None, "get_weather")]}),
        chunk({"tool_calls": [fragment(0, '{"city": ')]}),
        chunk({"tool_calls": [fragment(0, '"Paris"}')]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    out = repair_stream(body, REQUEST, emit="auto")
    assert violations(out, "atomic") == []  # one delta per call: held, then sent whole
    assert len(entries_sent(out)) == 1


def test_an_indexless_call_is_held() -> None:
    entry = {"id": "g1", "type": "function", "function": {"name": "get_weather"}}
    body = sse(
        chunk({"role": "assistant", "tool_calls": [entry]}),
        chunk({"tool_calls": [{"function": {"arguments": '{"city": "Rome"}'}}]}),
        chunk({}, "stop"),
        "[DONE]",
    )
    out = repair_stream(body, REQUEST, emit="auto")
    assert violations(out, "atomic") == []
    assert assembled_calls(out)[0][0]["arguments"] == '{"city": "Rome"}'


def test_a_call_whose_schema_wants_an_array_is_held_for_the_decoding() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "todo",
            "parameters": {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"type": "string"}}},
                "required": ["items"],
            },
        },
    }
    body = sse(
        chunk({"role": "assistant", "tool_calls": [opening(0, "call_t", "todo")]}),
        chunk({"tool_calls": [fragment(0, '{"items": "[\\"a\\"]"}')]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    out = repair_stream(body, {**REQUEST, "tools": [tool]}, emit="auto")
    assert [orjson.loads(c["arguments"]) for c in assembled_calls(out)[0]] == [{"items": ["a"]}]


def test_arguments_encoded_as_a_string_are_held_from_their_first_character() -> None:
    encoded = orjson.dumps('{"city": "Oslo"}').decode()
    body = sse(
        chunk({"role": "assistant", "tool_calls": [opening(0, "call_s", "get_weather")]}),
        chunk({"tool_calls": [fragment(0, encoded[:5])]}),
        chunk({"tool_calls": [fragment(0, encoded[5:])]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    out = repair_stream(body, REQUEST, emit="auto")
    assert violations(out, "auto") == []
    assert assembled_calls(out)[0][0]["arguments"] == '{"city":"Oslo"}'
    # The opening went as received; the text was held until it could be decoded.
    assert entries_sent(out)[0] == opening(0, "call_s", "get_weather")


def test_a_leaked_tail_is_added_to_the_streamed_call_and_the_next_is_held() -> None:
    body = sse(
        chunk({"role": "assistant", "tool_calls": [opening(0, "call_1", "get_weather")]}),
        chunk({"tool_calls": [fragment(0, '{"city": "Par')]}),
        chunk({"tool_calls": [opening(1, "call_2", "get_weather", 'is"}{"city": "Tokyo"}')]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    out = repair_stream(body, REQUEST, emit="auto")
    assert violations(out, "auto") == []
    calls = assembled_calls(out)[0]
    assert [c["arguments"] for c in calls] == ['{"city": "Paris"}', '{"city": "Tokyo"}']
    assert entries_sent(out)[1] == fragment(0, '{"city": "Par')  # streamed as it came


def test_streamed_empty_arguments_get_their_object() -> None:
    body = sse(
        chunk({"role": "assistant", "tool_calls": [opening(0, "call_e", "get_weather")]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    out = repair_stream(body, REQUEST, emit="auto")
    assert violations(out, "auto") == []
    assert assembled_calls(out)[0][0]["arguments"] == "{}"


def test_a_call_after_a_held_one_waits_for_it() -> None:
    body = sse(
        chunk({"role": "assistant", "tool_calls": [opening(0, None, "get_weather", "{}")]}),
        chunk({"tool_calls": [opening(1, "call_2", "get_weather", '{"city": "Rome"}')]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    out = repair_stream(body, REQUEST, emit="auto")
    assert violations(out, "atomic") == []
    assert [e["index"] for e in entries_sent(out)] == [0, 1]


def test_text_after_leading_whitespace_is_still_looked_at() -> None:
    encoded = orjson.dumps('{"city": "Oslo"}').decode()
    body = sse(
        chunk({"role": "assistant", "tool_calls": [opening(0, "call_w", "get_weather")]}),
        chunk({"tool_calls": [fragment(0, " ")]}),
        chunk({"tool_calls": [fragment(0, encoded)]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    out = repair_stream(body, REQUEST, emit="auto")
    assert violations(out, "auto") == []
    assert orjson.loads(assembled_calls(out)[0][0]["arguments"]) == {"city": "Oslo"}


def test_two_choices_relay_their_calls_apart() -> None:
    def choice(index: int, delta: dict[str, Any], finish: str | None = None) -> dict:
        return {"id": "c", "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}

    body = sse(
        choice(0, {"role": "assistant", "tool_calls": [opening(0, "call_x", "get_weather")]}),
        choice(1, {"role": "assistant", "tool_calls": [opening(0, "call_y", "get_weather")]}),
        choice(0, {"tool_calls": [fragment(0, '{"city": "A"}')]}),
        choice(1, {"tool_calls": [fragment(0, '{"city": "B"}')]}),
        choice(0, {}, "tool_calls"),
        choice(1, {}, "tool_calls"),
        "[DONE]",
    )
    assert repair_stream(body, REQUEST, emit="auto") == body


def test_a_call_cut_by_length_passes_as_received_and_is_noted_once() -> None:
    body = sse(
        chunk({"role": "assistant", "tool_calls": [opening(0, "call_c", "get_weather")]}),
        chunk({"tool_calls": [fragment(0, '{"city": "Pa')]}),
        chunk({}, "length"),
        "[DONE]",
    )
    tally = Tally("test")
    out = repair_stream(body, REQUEST, emit="auto", tally=tally)
    assert stream_chunks(out) == stream_chunks(body)
    assert tally.repairs == {"arguments_unparseable": 1}
