"""Repaired chat chunks -> Messages events (proxy/fronts/messages/events.py): golden sequences,
and the client rules every sequence keeps (tests/fronts/messages_checks.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from proxy.fronts import receipt_tokens
from proxy.fronts.messages.events import (
    Aborted,
    Clean,
    MessageEvents,
    UpstreamError,
    reasoning_text,
    whole,
)
from proxy.fronts.messages.tool_use_ids import upstream_id
from tests.fronts.messages_checks import parse, violations

FIXTURES = Path(__file__).parent / "fixtures"


def chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    choice.update(extra)
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice]}


def run(chunks: list[dict[str, Any]], end: Any = None, **options: Any) -> list[dict[str, Any]]:
    end = Clean() if end is None else end
    events = MessageEvents("glm-4.6", message_id="msg_fixture", **options)
    out: list[bytes] = []
    for item in chunks:
        out += events.feed(item)
    out += events.finish(end)
    return parse(b"".join(out))


def test_golden_thinking_text_and_two_calls() -> None:
    """The DeepSeek/GLM shape: reasoning, text, then calls (whole, as ToolCallRepair sends
    them by default), finish, then the usage chunk include_usage asks for."""
    chunks = [
        chunk({"role": "assistant", "reasoning_content": "The user wants "}),
        chunk({"reasoning_content": "the weather."}),
        chunk({"content": "I'll check"}),
        chunk({"content": " Paris."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'},
                    },
                    {
                        "index": 1,
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": ""},
                    },
                ]
            }
        ),
        chunk(finish="tool_calls"),
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 377, "completion_tokens": 65}},
    ]
    events = run(chunks, mint=lambda key: "SIGNATURE")
    assert events == parse((FIXTURES / "messages_tool_use.sse").read_bytes())
    assert violations(events) == []


def test_text_only_end_turn_and_max_tokens() -> None:
    events = run([chunk({"content": "Hello"}), chunk({"content": " there"}), chunk(finish="stop")])
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    cut = run([chunk({"content": "Hel"}), chunk(finish="length")])
    assert cut[-2]["delta"]["stop_reason"] == "max_tokens"
    assert violations(events) == violations(cut) == []


def test_stop_sequence_when_the_upstream_names_it() -> None:
    """vLLM says which stop string matched (`stop_reason` on the choice)."""
    events = run(
        [chunk({"content": "a"}), chunk(finish="stop", stop_reason="END")], stop_sequences=["END"]
    )
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_calls_after_a_stop_finish_still_say_tool_use() -> None:
    """Gemini ends a calling turn with "stop"; the repaired finish and the blocks agree."""
    call = {
        "index": 0,
        "id": "c1",
        "function": {"name": "Bash", "arguments": '{"command":"echo hi"}'},
    }
    events = run([chunk({"tool_calls": [call]}), chunk(finish="stop")])
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert violations(events) == []


def test_interleaved_call_fragments_become_whole_blocks() -> None:
    """Incremental emission with calls interleaved: one block per call, input whole."""

    def fragment(index: int, **function: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": index, "function": function}
        if "name" in function:
            entry["id"] = f"id{index}"
        return chunk({"tool_calls": [entry]})

    chunks = [
        fragment(0, name="a", arguments='{"x":'),
        fragment(1, name="b", arguments='{"y":'),
        fragment(0, arguments="1}"),
        fragment(1, arguments="2}"),
        chunk(finish="tool_calls"),
    ]
    events = run(chunks)
    inputs = [e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"]
    assert inputs == ['{"x":1}', '{"y":2}']
    assert violations(events) == []


def test_reasoning_after_text_opens_a_new_block_never_interleaved() -> None:
    events = run(
        [
            chunk({"content": "a"}),
            chunk({"reasoning": "b"}),
            chunk({"content": "c"}),
            chunk(finish="stop"),
        ]
    )
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["text", "thinking", "text"]
    assert violations(events) == []


def test_reasoning_fields_read_once() -> None:
    """OpenRouter repeats the text in `reasoning` and `reasoning_details`."""
    both = {
        "reasoning": "x",
        "reasoning_details": [{"type": "reasoning.text", "text": "x", "index": 0}],
    }
    assert reasoning_text(both) == "x"
    assert (
        reasoning_text({"reasoning_details": [{"type": "reasoning.summary", "summary": "s"}]})
        == "s"
    )
    assert (
        reasoning_text({"reasoning_details": [{"type": "reasoning.encrypted", "data": "e"}]}) == ""
    )
    assert reasoning_text({"content": "t"}) is None


def test_the_thinking_signature_is_a_token_for_this_tenant_and_message() -> None:
    scope = "tenant:up"
    events = run(
        [chunk({"reasoning_content": "r"}), chunk({"content": "a"}), chunk(finish="stop")],
        mint=lambda key: receipt_tokens.mint(scope, key),
    )
    signature = next(
        e["delta"]["signature"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "signature_delta"
    )
    assert receipt_tokens.read(signature, scope) == "turn:msg_fixture"
    assert receipt_tokens.read(signature, "other:up") is None


def test_an_upstream_error_after_the_first_byte_is_an_error_event_and_nothing_after() -> None:
    body = {"error": {"message": "overloaded", "type": "server_error"}}
    events = run([chunk({"content": "partial"})], UpstreamError(body))
    assert events[-1] == {"type": "error", "error": {"type": "api_error", "message": "overloaded"}}
    assert violations(events, complete=False) == []


def test_a_stream_cut_mid_tool_use_is_an_error_not_an_end_turn() -> None:
    call = {"index": 0, "id": "c1", "function": {"name": "Bash", "arguments": '{"comm'}}
    events = run(
        [chunk({"content": "running"}), chunk({"tool_calls": [call]})],
        Aborted("upstream broke off"),
    )
    assert events[-1]["type"] == "error"
    assert "upstream broke off" in events[-1]["error"]["message"]
    assert not any(
        e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
        for e in events
    )
    assert violations(events, complete=False) == []


def test_an_error_before_any_chunk_still_starts_the_message() -> None:
    events = run([], UpstreamError({"error": "boom"}))
    assert [e["type"] for e in events] == ["message_start", "error"]


def test_ping_sends_message_start_first() -> None:
    events = MessageEvents("m")
    first = parse(b"".join(events.ping()))
    assert [e["type"] for e in first] == ["message_start", "ping"]
    assert [e["type"] for e in parse(b"".join(events.ping()))] == ["ping"]


def test_usage_with_cached_tokens() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 60},
    }
    events = run([chunk({"content": "a"}, finish="stop"), {"choices": [], "usage": usage}])
    assert events[-2]["usage"] == {
        "input_tokens": 40,
        "output_tokens": 5,
        "cache_read_input_tokens": 60,
    }


def test_whole_non_streamed() -> None:
    completion = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "ok",
                    "reasoning_content": "think",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "Bash", "arguments": '{"command":"ls"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
    }
    message = whole(completion, "m", message_id="msg_1", mint=lambda key: "sig:" + key)
    assert message == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [
            {"type": "thinking", "thinking": "think", "signature": "sig:turn:msg_1"},
            {"type": "text", "text": "ok"},
            {"type": "tool_use", "id": "c1", "name": "Bash", "input": {"command": "ls"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    plain = whole({"choices": [{"message": {"content": "hi"}, "finish_reason": "length"}]}, "m")
    assert plain["content"] == [{"type": "text", "text": "hi"}]
    assert plain["stop_reason"] == "max_tokens"


def test_a_call_without_a_name_or_with_arguments_that_are_no_object() -> None:
    """ToolCallRepair names and mends every call; should one still come through without a name
    or with arguments that are not one JSON object, the client never gets a broken block."""
    nameless = {"index": 0, "id": "c1", "function": {"arguments": "{}"}}
    listed = {"index": 1, "id": "c2", "function": {"name": "Bash", "arguments": "[1, 2]"}}
    translator = MessageEvents("m", message_id="msg_1")
    out = translator.feed(chunk({"tool_calls": [nameless, listed]}, "tool_calls"))
    events = parse(b"".join(out + translator.finish(Clean())))
    assert violations(events) == []
    inputs = [e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"]
    assert inputs == ["{}"]
    assert translator.counts == {"tool_call_without_name_dropped": 1, "tool_input_not_an_object": 1}


# ── hostile chunks (tests/fronts/test_hostile_upstream.py found these) ──────


def test_tool_calls_that_are_not_a_list_say_nothing() -> None:
    """A number as `tool_calls` raised TypeError mid-stream (no `message_stop`)."""
    events = run([chunk({"content": "hi", "tool_calls": 5}), chunk(finish="stop")])
    assert not violations(events)
    assert events[-2]["delta"]["stop_reason"] == "end_turn"


def test_a_whole_answer_with_calls_that_are_not_a_list_or_unnamed() -> None:
    """`tool_calls: 5` raised TypeError; a call named by a number became a `tool_use` block
    with a number for a name; arguments given as a number were read as JSON text."""
    for calls in (5, [{"function": {"name": 7, "arguments": "{}"}}]):
        completion = {"choices": [{"message": {"content": "hi", "tool_calls": calls}}]}
        message = whole(completion, "m", message_id="msg_1")
        assert message["content"] == [{"type": "text", "text": "hi"}]
        assert message["stop_reason"] == "end_turn"
    call = {"id": "c", "function": {"name": "f", "arguments": 5}}
    completion = {"choices": [{"message": {"tool_calls": [call]}}]}
    assert whole(completion, "m")["content"][0]["input"] == {}


def test_usage_counts_that_are_negative_booleans_or_strings_are_zero() -> None:
    """A prompt count that is no count is no report: `message_delta` leaves `input_tokens`
    out, so the estimate `message_start` gave stands (the SDKs keep what it leaves out)."""
    usage = {"prompt_tokens": -5, "completion_tokens": True, "prompt_tokens_details": {}}
    events = run([{**chunk({"content": "hi"}, finish="stop"), "usage": usage}])
    assert events[-2]["usage"] == {"output_tokens": 0}


# ── usage: message_start's estimate, message_delta's report ─────────────────


def test_message_start_carries_the_estimate_and_message_delta_every_reported_count() -> None:
    """Claude Code's context meter adds input, cache creation, cache read and output: the
    prompt OpenRouter reports (cache read and written inside it) is split so they add up."""
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300},
    }
    translator = MessageEvents("m", message_id="msg_1", input_estimate=1234)
    out = translator.feed(chunk({"content": "a"}, finish="stop"))
    out += translator.feed({"choices": [], "usage": usage})
    events = parse(b"".join(out + translator.finish(Clean())))
    assert events[0]["message"]["usage"] == {"input_tokens": 1234, "output_tokens": 0}
    assert events[-2]["usage"] == {
        "input_tokens": 100,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 600,
        "output_tokens": 5,
    }
    assert translator.counts == {}


def test_moonshot_and_deepseek_say_their_cache_in_their_own_fields() -> None:
    """Moonshot streams its usage inside the finishing choice, `cached_tokens` beside
    `prompt_tokens`; DeepSeek says `prompt_cache_hit_tokens`."""
    moonshot = {"prompt_tokens": 233, "completion_tokens": 41, "cached_tokens": 200}
    events = run([chunk({"content": "a"}, finish="stop", usage=moonshot)], input_estimate=9)
    assert events[-2]["usage"] == {
        "input_tokens": 33,
        "cache_read_input_tokens": 200,
        "output_tokens": 41,
    }
    deepseek = {"prompt_tokens": 50, "completion_tokens": 2, "prompt_cache_hit_tokens": 48}
    events = run([chunk({"content": "a"}, finish="stop"), {"choices": [], "usage": deepseek}])
    assert events[-2]["usage"] == {
        "input_tokens": 2,
        "cache_read_input_tokens": 48,
        "output_tokens": 2,
    }


def test_without_a_reported_prompt_the_estimate_stands_and_is_counted() -> None:
    translator = MessageEvents("m", message_id="msg_1", input_estimate=700)
    out = translator.feed(chunk({"content": "a"}, finish="stop"))
    events = parse(b"".join(out + translator.finish(Clean())))
    assert events[0]["message"]["usage"]["input_tokens"] == 700
    assert events[-2]["usage"] == {"output_tokens": 0}  # nothing overwrites the estimate
    assert translator.counts == {"messages_input_tokens_estimated": 1}


def test_a_whole_answer_has_the_reported_usage_or_the_estimate() -> None:
    completion: dict[str, Any] = {"choices": [{"message": {"content": "hi"}}]}
    translator = MessageEvents("m", message_id="msg_1", input_estimate=700)
    assert translator.whole(completion)["usage"] == {"input_tokens": 700, "output_tokens": 0}
    assert translator.counts == {"messages_input_tokens_estimated": 1}
    completion["usage"] = {
        "prompt_tokens": 900,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 800},
    }
    translator = MessageEvents("m", message_id="msg_1", input_estimate=700)
    assert translator.whole(completion)["usage"] == {
        "input_tokens": 100,
        "cache_read_input_tokens": 800,
        "output_tokens": 3,
    }
    assert translator.counts == {}


# ── call ids in Anthropic's alphabet ─────────────────────────────────────────

ALPHABET = re.compile(r"^[a-zA-Z0-9_-]+$")


def test_kimis_ids_reach_the_client_in_anthropics_alphabet_and_the_turn_keeps_kimis() -> None:
    calls = [
        {
            "index": 0,
            "id": "functions.get_weather:0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        },
        {
            "index": 1,
            "id": "call_in_the_alphabet-1",
            "type": "function",
            "function": {"name": "get_time", "arguments": "{}"},
        },
    ]
    translator = MessageEvents("m", message_id="msg_1", mint=lambda key: "sig:" + key)
    out = translator.feed(chunk({"reasoning_content": "think", "tool_calls": calls}))
    out += translator.feed(chunk(finish="tool_calls"))
    events = parse(b"".join(out + translator.finish(Clean())))
    assert not violations(events)
    ids = [
        e["content_block"]["id"]
        for e in events
        if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    ]
    assert all(ALPHABET.match(i) for i in ids), ids
    assert ids[1] == "call_in_the_alphabet-1"  # already in the alphabet: as it came
    assert ids[0] != "functions.get_weather:0"
    assert upstream_id(ids[0]) == "functions.get_weather:0"
    assert translator.counts == {"messages_tool_use_id_encoded": 1}
    turn = translator.turn()
    assert turn is not None
    assert [c["id"] for c in turn["tool_calls"]] == [c["id"] for c in calls]
    whole_translator = MessageEvents("m", message_id="msg_2")
    completion = {"choices": [{"message": {"tool_calls": calls}, "finish_reason": "tool_calls"}]}
    blocks = whole_translator.whole(completion)["content"]
    assert [b["id"] for b in blocks] == ids
    assert whole_translator.counts["messages_tool_use_id_encoded"] == 1
