"""Repaired chat chunks -> Responses events: golden sequences.

The shapes are those of OpenAI's own streams as the SDK repositories ship them (the AI SDK's
`packages/openai/src/responses/__fixtures__/*.chunks.txt`: openai-reasoning-encrypted-content,
issue-19493-gpt-5.1-tool-call, openai-custom-tool): the key sets below were read there, the
fixtures in this file are our own."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.fronts.responses.events import (
    ResponsesEvents,
    aborted,
    upstream_error,
    whole,
)
from tests.fronts.responses.events_support import USAGE, call, delta, parse, run, translation

# Each event type's keys in OpenAI's captures (the obfuscation field left out: a side channel
# padding, no client reads it).
CAPTURED_KEYS = {
    "response.created": {"type", "sequence_number", "response"},
    "response.in_progress": {"type", "sequence_number", "response"},
    "response.output_item.added": {"type", "sequence_number", "output_index", "item"},
    "response.output_item.done": {"type", "sequence_number", "output_index", "item"},
    "response.content_part.added": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "content_index",
        "part",
    },
    "response.content_part.done": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "content_index",
        "part",
    },
    "response.output_text.delta": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "content_index",
        "delta",
        "logprobs",
    },
    "response.output_text.done": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "content_index",
        "text",
        "logprobs",
    },
    "response.reasoning_summary_part.added": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "summary_index",
        "part",
    },
    "response.reasoning_summary_part.done": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "summary_index",
        "part",
    },
    "response.reasoning_summary_text.delta": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "summary_index",
        "delta",
    },
    "response.reasoning_summary_text.done": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "summary_index",
        "text",
    },
    "response.function_call_arguments.delta": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "delta",
    },
    "response.function_call_arguments.done": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "arguments",
    },
    "response.custom_tool_call_input.delta": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "delta",
    },
    "response.custom_tool_call_input.done": {
        "type",
        "sequence_number",
        "item_id",
        "output_index",
        "input",
    },
    "response.completed": {"type", "sequence_number", "response"},
    "response.incomplete": {"type", "sequence_number", "response"},
    "response.failed": {"type", "sequence_number", "response"},
}
RESPONSE_KEYS = {
    "id",
    "object",
    "created_at",
    "status",
    "error",
    "incomplete_details",
    "instructions",
    "max_output_tokens",
    "model",
    "output",
    "parallel_tool_calls",
    "previous_response_id",
    "reasoning",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "usage",
    "user",
    "metadata",
}


def check_invariants(events: list[dict[str, Any]]) -> None:
    """What every client needs of any stream (RESPONSES.md §1)."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    terminals = [
        e
        for e in events
        if e["type"] in ("response.completed", "response.incomplete", "response.failed")
    ]
    assert terminals == [events[-1]]
    for event in events:
        assert set(event) == CAPTURED_KEYS[event["type"]], event["type"]
        if "response" in event:
            assert set(event["response"]) >= RESPONSE_KEYS
    added: dict[str, int] = {}
    done: dict[str, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "response.output_item.added":
            assert event["output_index"] == len(added)  # dense, in output order
            added[event["item"]["id"]] = event["output_index"]
        elif event["type"] == "response.output_item.done":
            assert event["item"]["id"] in added
            done[event["item"]["id"]] = event["item"]
        elif "item_id" in event:
            assert event["item_id"] in added and event["item_id"] not in done
            assert event["output_index"] == added[event["item_id"]]
    final = events[-1]["response"]
    if final["status"] != "failed":
        assert [item["id"] for item in final["output"]] == list(added)
        assert final["output"] == [done[item_id] for item_id in added]


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"].removeprefix("response.") for e in events]


def test_text_with_late_usage() -> None:
    _, events = run(
        [
            delta(role="assistant", content=""),
            delta(content="Hel"),
            delta(content="lo"),
            delta(finish="stop"),
            {"id": "chatcmpl-1", "choices": [], "usage": USAGE},
        ]
    )
    check_invariants(events)
    assert types(events) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert final["output"][0]["content"] == [
        {"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}
    ]
    assert final["output"][0]["id"].startswith("msg_")
    assert final["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 2},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 15,
    }


def test_deepseek_reasoning_then_a_call_carries_the_token() -> None:
    events_, events = run(
        [
            delta(role="assistant", reasoning_content="Let me "),
            delta(reasoning_content="think."),
            delta(tool_calls=[call(0, "call_1", "get_weather", '{"city":')]),
            delta(tool_calls=[call(0, arguments='"Paris"}')]),
            delta(finish="tool_calls", usage=USAGE),
        ]
    )
    check_invariants(events)
    assert types(events) == [
        "created",
        "in_progress",
        "output_item.added",
        "reasoning_summary_part.added",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.done",
        "reasoning_summary_part.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    reasoning, function = events[-1]["response"]["output"]
    assert reasoning == {
        "id": reasoning["id"],
        "type": "reasoning",
        "encrypted_content": "sf1.tok",
        "summary": [{"type": "summary_text", "text": "Let me think."}],
    }
    assert function["call_id"] == "call_1" and function["id"].startswith("fc_")
    assert function["arguments"] == '{"city":"Paris"}' and function["status"] == "completed"
    assert events_.assistant_message() == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Let me think.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }


def test_parallel_interleaved_calls_and_text_after_them() -> None:
    _, events = run(
        [
            delta(content="Checking."),
            delta(tool_calls=[call(0, "call_a", "a", "{")]),
            delta(tool_calls=[call(1, "call_b", "b", "{")]),
            delta(tool_calls=[call(0, arguments="}")]),
            delta(tool_calls=[call(1, arguments="}")]),
            delta(content="Done."),
            delta(finish="tool_calls"),
        ]
    )
    check_invariants(events)
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == [
        "message",
        "function_call",
        "function_call",
        "message",
    ]
    assert [item.get("arguments") for item in output[1:3]] == ["{}", "{}"]
    assert output[3]["content"][0]["text"] == "Done."
    assert events[-1]["response"]["usage"] is None


def test_gemini_signatures_without_reasoning_get_a_carrier_item() -> None:
    signature = {"google": {"thought_signature": "SIG"}}
    events_, events = run(
        [
            delta(tool_calls=[call(0, "call_1", "f", "{}", extra_content=signature)]),
            delta(finish="stop"),
        ]
    )
    check_invariants(events)
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["function_call", "reasoning"]
    assert output[1] == {
        "id": output[1]["id"],
        "type": "reasoning",
        "summary": [],
        "encrypted_content": "sf1.tok",
    }
    assert events_.assistant_message()["tool_calls"][0]["extra_content"] == signature


def test_no_token_no_encrypted_content_and_no_carrier() -> None:
    _, events = run(
        [
            delta(tool_calls=[call(0, "c", "f", "{}", extra_content={"x": 1})]),
            delta(finish="tool_calls"),
        ],
        token=None,
    )
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["function_call"]


def test_openrouter_reasoning_details_merge_and_show_once() -> None:
    events_, events = run(
        [
            delta(
                reasoning="Thin",
                reasoning_details=[
                    {"type": "reasoning.text", "text": "Thin", "index": 0, "format": "x"}
                ],
            ),
            delta(
                reasoning="king",
                reasoning_details=[{"type": "reasoning.text", "text": "king", "index": 0}],
            ),
            delta(reasoning_details=[{"type": "reasoning.encrypted", "data": "ENC", "index": 1}]),
            delta(content="Hi"),
            delta(finish="stop"),
        ]
    )
    check_invariants(events)
    assert events[-1]["response"]["output"][0]["summary"][0]["text"] == "Thinking"
    message = events_.assistant_message()
    assert message["reasoning"] == "Thinking"
    assert message["reasoning_details"] == [
        {"type": "reasoning.text", "text": "Thinking", "index": 0, "format": "x"},
        {"type": "reasoning.encrypted", "data": "ENC", "index": 1},
    ]


def test_a_custom_tool_comes_back_as_a_custom_tool_call() -> None:
    _, events = run(
        [
            delta(tool_calls=[call(0, "call_p", "apply_patch", '{"input":"*** Begin')]),
            delta(tool_calls=[call(0, arguments=' Patch"}')]),
            delta(finish="tool_calls"),
        ],
        custom=frozenset({"apply_patch"}),
    )
    check_invariants(events)
    assert types(events)[2:-1] == [
        "output_item.added",
        "custom_tool_call_input.delta",
        "custom_tool_call_input.done",
        "output_item.done",
    ]
    item = events[-1]["response"]["output"][0]
    assert item["type"] == "custom_tool_call" and item["input"] == "*** Begin Patch"
    assert item["call_id"] == "call_p" and item["id"].startswith("ctc_")


def test_a_namespaced_call_gets_its_name_and_namespace_back() -> None:
    events_, events = run(
        [delta(tool_calls=[call(0, "c", "ns__spawn", "{}")]), delta(finish="tool_calls")],
        **{"ns__spawn": ("ns", "spawn")},
    )
    item = events[-1]["response"]["output"][0]
    assert (item["name"], item["namespace"]) == ("spawn", "ns")
    assert events_.assistant_message()["tool_calls"][0]["function"]["name"] == "ns__spawn"


def test_length_is_incomplete_with_max_output_tokens() -> None:
    _, events = run([delta(content="abc"), delta(finish="length")])
    check_invariants(events)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


@pytest.mark.parametrize(
    ("end", "code"),
    [
        (
            upstream_error({"error": {"message": "boom", "code": "rate_limit_exceeded"}}),
            "rate_limit_exceeded",
        ),
        (aborted("upstream broke off"), "stream_aborted"),
    ],
)
def test_a_failed_stream_still_ends_with_a_terminal(end: Any, code: str) -> None:
    _, events = run([delta(tool_calls=[call(0, "c", "f", '{"a"')])], end=end)
    check_invariants(events)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == code
    assert not any(e["type"] == "response.output_item.done" for e in events)


def test_an_empty_stream_completes_with_no_output() -> None:
    _, events = run([])
    check_invariants(events)
    assert types(events) == ["created", "in_progress", "completed"]


def test_keepalive_is_an_in_progress_event_in_sequence() -> None:
    events_ = ResponsesEvents(translation(), {"model": "m"})
    raw = [*events_.start(), events_.keepalive(), *events_.finish()]
    events = parse(raw)
    assert types(events) == ["created", "in_progress", "in_progress", "completed"]
    check_invariants(events)


def test_whole_turns_a_completion_into_the_response_object() -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Let me look.",
                    "reasoning_content": "hmm",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
            }
        ],
        "usage": USAGE,
    }
    response = whole(ResponsesEvents(translation(), {"model": "m"}, token="sf1.t"), completion)
    assert response["status"] == "completed"
    assert [item["type"] for item in response["output"]] == [
        "reasoning",
        "message",
        "function_call",
    ]
    assert response["output"][2]["call_id"] == "call_1"
    assert response["usage"]["total_tokens"] == 15


# ── hostile chunks (tests/fronts/test_hostile_upstream.py found these) ──────


@pytest.mark.parametrize("function", ["get_weather", ["get_weather"], 1.5, None])
def test_a_call_whose_function_is_not_an_object_is_still_an_item(function: Any) -> None:
    """`function.get` raised AttributeError on a list, a float or a string (the stream ended
    without its terminal event)."""
    piece = {"index": 0, "id": ["call_1"], "function": function}
    _, events = run([delta(tool_calls=[piece]), delta(finish="tool_calls")])
    check_invariants(events)
    item = events[-1]["response"]["output"][0]
    assert item["type"] == "function_call" and item["name"] == ""
    assert item["call_id"].startswith("call_")  # a new id: a list is not one


@pytest.mark.parametrize("choices", [5, "abc", {"index": 0}])
def test_choices_that_are_not_a_list_say_nothing(choices: Any) -> None:
    _, events = run([{"choices": choices}, delta(content="hi"), delta(finish="stop")])
    check_invariants(events)
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "hi"


@pytest.mark.parametrize("message", [True, 9223372036854775808, "hello", ["content"]], ids=str)
def test_a_whole_answer_whose_message_is_not_an_object_has_no_output(message: Any) -> None:
    """`dict(message)` raised TypeError (a 500) on a boolean or a number."""
    completion = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    answer = whole(ResponsesEvents(translation(), {"model": "m"}), completion)
    assert answer["status"] == "completed" and answer["output"] == []


def test_usage_details_that_are_not_objects_and_negative_counts_are_zero() -> None:
    """`.get` raised AttributeError on a list of details; a negative count went out as one."""
    usage = {
        "prompt_tokens": -5,
        "completion_tokens": "5",
        "total_tokens": -1,
        "prompt_tokens_details": [2],
        "completion_tokens_details": "3",
    }
    _, events = run([delta(content="hi"), delta(finish="stop", usage=usage)])
    assert events[-1]["response"]["usage"] == {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0,
    }


def test_an_integer_past_64_bits_in_usage_or_a_receipt_is_written_exactly() -> None:
    """orjson cannot write such an integer: the terminal event raised TypeError, and the
    stream went out without it."""
    usage = {**USAGE, "prompt_tokens": 2**70}
    signature = {"google": {"thought_signature": 2**70}}
    events_, events = run(
        [
            delta(tool_calls=[call(0, "call_1", "f", "{}", extra_content=signature)]),
            delta(finish="tool_calls", usage=usage),
        ]
    )
    check_invariants(events)
    assert events[-1]["response"]["usage"]["input_tokens"] == 2**70
    turn = events_.turn()
    assert turn is not None and turn["tool_calls"][0]["extra_content"] == signature
