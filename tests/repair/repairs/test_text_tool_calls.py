"""TextToolCallRepair (proxy/repair/repairs/text_tool_calls.py) in the whole strict chain:
markup written as content reaches the client as real tool calls, delivered by ToolCallRepair
with an id and a `tool_calls` finish; everything refused goes on exactly as received."""

from __future__ import annotations

import asyncio

import orjson

from proxy.repair.conformance import violations
from proxy.repair.markup.rules import MarkupRules
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from tests.repair.markup.test_recogniser import CALL, REQUEST, WEATHER
from tests.support.phases import forwarded, phases
from tests.support.streams import (
    assembled_calls,
    content,
    finish_reasons,
    reasoning,
    repair_stream,
    sse,
)

ENVELOPE = {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(text: str | None = None, finish: str | None = None, role: bool = False) -> dict:
    delta: dict = {"role": "assistant"} if role else {}
    if text is not None:
        delta["content"] = text
    return {**ENVELOPE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def markup_stream(answer: str, width: int = 7, finish: str = "stop") -> bytes:
    pieces = [answer[i : i + width] for i in range(0, len(answer), width)]
    return sse(chunk("", role=True), *map(chunk, pieces), chunk(finish=finish), "[DONE]")


def test_a_streamed_call_written_as_text_becomes_a_tool_call() -> None:
    body = repair_stream(markup_stream(f"Checking.\n{CALL}"), REQUEST)
    [call] = assembled_calls(body)[0]
    assert call["name"] == "get_weather" and orjson.loads(call["arguments"]) == {"city": "Paris"}
    assert call["id"].startswith("call_")
    assert content(body) == {0: "Checking.\n"}
    assert finish_reasons(body) == {0: ["tool_calls"]}
    assert violations(body) == []
    assert b"tool_call>" not in body


def test_the_same_exchange_gets_the_same_id() -> None:
    raw = markup_stream(CALL)
    first = assembled_calls(repair_stream(raw, REQUEST))[0][0]["id"]
    assert assembled_calls(repair_stream(raw, REQUEST))[0][0]["id"] == first


def test_plain_text_with_tools_declared_goes_on_byte_for_byte() -> None:
    raw = markup_stream("The weather in Paris is [mild] <b>today</b> and `dry`.")
    assert repair_stream(raw, REQUEST) == raw


def test_without_tools_the_markup_stays_content() -> None:
    raw = markup_stream(CALL)
    assert repair_stream(raw, {"messages": []}) == raw
    assert repair_stream(raw, {**REQUEST, "tool_choice": "none"}) == raw


def test_cut_off_by_length_the_markup_stays_text_and_length_stays() -> None:
    cut = CALL[:-25]
    body = repair_stream(markup_stream(cut, finish="length"), REQUEST)
    assert content(body) == {0: cut}
    assert finish_reasons(body) == {0: ["length"]}
    assert 0 not in assembled_calls(body)


def test_a_stream_that_ends_without_a_finish_still_gets_its_call() -> None:
    pieces = [CALL[i : i + 5] for i in range(0, len(CALL), 5)]
    body = repair_stream(sse(chunk("", role=True), *map(chunk, pieces), "[DONE]"), REQUEST)
    assert [c["name"] for c in assembled_calls(body)[0]] == ["get_weather"]
    assert finish_reasons(body) == {0: ["tool_calls"]}


def run_response(body: dict, request: dict, rules: MarkupRules | None = None) -> Tally:
    exchange = Tally("t")
    sent = forwarded(request, RouteRules(markup=rules or MarkupRules()))
    asyncio.run(phases().stream(sent, exchange).on_response(body))
    return exchange


def completion(text: str, finish: str = "stop") -> dict:
    message = {"role": "assistant", "content": text}
    return {
        "id": "chatcmpl-n",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


def test_a_non_streamed_call_written_as_text_becomes_a_tool_call() -> None:
    body = completion(f"{CALL}\n")
    exchange = run_response(body, REQUEST)
    choice = body["choices"][0]
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_") and "index" not in call
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert choice["message"]["content"] is None
    assert choice["finish_reason"] == "tool_calls"
    assert exchange.repairs["text_tool_call"] == 1


def test_non_streamed_refusals_and_length_leave_the_body_alone() -> None:
    for text, finish in [
        (CALL.replace("get_weather", "delete_all"), "stop"),
        (CALL[:-3], "length"),
    ]:
        body = completion(text, finish)
        before = orjson.dumps(body)
        run_response(body, REQUEST)
        assert orjson.dumps(body) == before


def test_a_route_that_turns_it_off_gets_the_text() -> None:
    body = completion(CALL)
    exchange = run_response(body, REQUEST, MarkupRules(text_tool_calls=False))
    assert body["choices"][0]["message"]["content"] == CALL
    assert "text_tool_call" not in exchange.repairs


def test_an_undeclared_second_tool_keeps_the_whole_answer_text() -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    request = {"messages": [], "tools": [WEATHER, other]}
    answer = CALL + CALL.replace("get_weather", "get_time").replace('"city": "Paris"', "")
    body = repair_stream(markup_stream(answer), request)
    assert [c["name"] for c in assembled_calls(body)[0]] == ["get_weather", "get_time"]


def test_a_call_written_while_thinking_stays_in_the_reasoning() -> None:
    answer = f"<think>I could try {CALL} but no.</think>It is sunny."
    body = repair_stream(markup_stream(answer), REQUEST)
    assert 0 not in assembled_calls(body)
    assert content(body) == {0: "It is sunny."}
    assert finish_reasons(body) == {0: ["stop"]}
    assert reasoning(body) == {0: f"I could try {CALL} but no."}


def test_harmony_leaking_whole_gives_reasoning_and_a_call() -> None:
    answer = (
        "<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>'
    )
    for width in (1, 4, 11):
        body = repair_stream(markup_stream(answer, width=width), REQUEST)
        [call] = assembled_calls(body)[0]
        assert call["name"] == "get_weather" and orjson.loads(call["arguments"]) == {
            "city": "Paris"
        }
        assert reasoning(body) == {0: "Need the weather."}
        assert content(body).get(0, "") == ""
        assert finish_reasons(body) == {0: ["tool_calls"]}


GLM_CALL = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"


def test_a_glm_call_that_ends_the_thinking_without_its_close_is_a_call() -> None:
    """GLM-5 goes from thinking into a call with no `</think>`; vLLM's GLM parser reads the
    `<tool_call>` as the end of the reasoning. Before, all of it stayed reasoning."""
    answer = f"<think>Need the weather.\n{GLM_CALL}"
    for width in (1, 3, 8, len(answer)):
        body = repair_stream(markup_stream(answer, width=width), REQUEST)
        [call] = assembled_calls(body)[0]
        assert call["name"] == "get_weather" and orjson.loads(call["arguments"]) == {
            "city": "Paris"
        }
        assert reasoning(body) == {0: "Need the weather.\n"}, width
        assert content(body).get(0, "") == ""
        assert finish_reasons(body) == {0: ["tool_calls"]}


def test_a_glm_opener_that_is_not_a_call_stays_in_the_reasoning() -> None:
    answer = "<think>The <tool_call> tag, then.</think>It is sunny."
    for width in (1, 3, 8, len(answer)):
        body = repair_stream(markup_stream(answer, width=width), REQUEST)
        assert reasoning(body) == {0: "The <tool_call> tag, then."}
        assert content(body) == {0: "It is sunny."}
