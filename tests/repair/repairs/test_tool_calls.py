"""One regression test per upstream behaviour in tests/transcripts/, through the real pipeline
in-process (the real-client suite replays the same transcripts over sockets)."""

from __future__ import annotations

import orjson
import pytest

from proxy.repair.conformance import stream_chunks, violations
from tests.support.fake_upstream import load_transcript, transcript_names
from tests.support.streams import (
    assembled_calls,
    content,
    finish_reasons,
    reasoning,
    repair_stream,
    sse,
)

# Argument text already sent as fragments cannot be mended afterwards: in incremental mode
# these transcripts come out as received (checked below), in atomic mode they are repaired.
NOT_REPAIRABLE_INCREMENTALLY = {"vllm_args_tail_under_next_index"}


def request_of(name: str) -> dict:
    return {
        "messages": [{"role": "user", "content": "go"}],
        **load_transcript(name).meta["request"],
    }


def check_against_expectation(name: str, emit: str) -> None:
    transcript = load_transcript(name)
    out = repair_stream(transcript.sse, request_of(name), emit=emit)
    assert violations(out, emit) == []
    calls = assembled_calls(out)
    text = content(out)
    reasons = finish_reasons(out)
    for expected in transcript.meta["expect"]["choices"]:
        index = expected["index"]
        assert reasons.get(index) == [expected["finish_reason"]]
        assert text.get(index, "") == expected["content"]
        if "reasoning_content" in expected:  # reasoning the proxy moved out of the content
            assert reasoning(out).get(index, "") == expected["reasoning_content"]
        got = calls.get(index, [])
        assert [c["name"] for c in got] == [c["name"] for c in expected["tool_calls"]]
        for call, want in zip(got, expected["tool_calls"], strict=True):
            assert orjson.loads(call["arguments"]) == want["arguments"]
            if want["id"] is None:
                assert call["id"].startswith("call_") and len(call["id"]) == 29
            else:
                assert call["id"] == want["id"]
            signature = ((call["extra_content"] or {}).get("google") or {}).get("thought_signature")
            assert signature == want.get("thought_signature")


@pytest.mark.parametrize("name", transcript_names())
def test_transcript_repairs_to_expected_calls(name: str) -> None:
    check_against_expectation(name, "atomic")


@pytest.mark.parametrize("name", transcript_names())
def test_transcript_repairs_to_expected_calls_in_auto_emission(name: str) -> None:
    """Auto holds what a fix may change, so every transcript repairs as atomic's does, the
    leaked tail included (the streamed call gets the tail added)."""
    check_against_expectation(name, "auto")


@pytest.mark.parametrize("name", sorted(set(transcript_names()) - NOT_REPAIRABLE_INCREMENTALLY))
def test_transcript_repairs_to_expected_calls_incrementally(name: str) -> None:
    check_against_expectation(name, "incremental")


@pytest.mark.parametrize("name", transcript_names())
def test_transcript_cut_at_every_byte_gives_the_same_output(name: str) -> None:
    transcript = load_transcript(name)
    whole = stream_chunks(repair_stream(transcript.sse, request_of(name)))
    pieces = [transcript.sse[i : i + 1] for i in range(len(transcript.sse))]
    assert stream_chunks(repair_stream(b"", request_of(name), pieces=pieces)) == whole


def test_args_tail_already_streamed_incrementally_passes_as_received() -> None:
    name = "vllm_args_tail_under_next_index"
    out = repair_stream(load_transcript(name).sse, request_of(name), emit="incremental")
    assert violations(out, "incremental") == []
    calls = assembled_calls(out)[0]
    assert [c["arguments"] for c in calls] == ['{"city": "Par', 'is"}{"city": "Tokyo"}']


ENVELOPE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(delta: dict, finish: str | None = None, index: int = 0) -> dict:
    choice = {"index": index, "delta": delta}
    if finish:
        choice["finish_reason"] = finish
    return {**ENVELOPE, "choices": [choice]}


def test_untouched_text_chunks_are_forwarded_byte_for_byte() -> None:
    text = (
        b'data: {"id":"x","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}'
        b"\r\n\r\n"
        b": keep-alive\n\n"
        b"data: not json at all\n\n"
        b'event: custom\ndata: {"choices":[]}\n\n'
        b'data: {"id":"x","choices":[],"usage":{"total_tokens":3}}\n\n'
    )
    finish = b'data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    out = repair_stream(text + finish + b"data: [DONE]\n\n")
    assert out == text + finish + b"data: [DONE]\n\n"


def test_nameless_call_with_ambiguous_tools_is_left_out_never_sent_nameless() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": n,
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
            },
        }
        for n in ("read", "delete")
    ]
    body = sse(
        chunk({"role": "assistant", "content": "Sure."}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path":"a"}'}}]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    out = repair_stream(body, {"messages": [], "tools": tools})
    assert assembled_calls(out) == {}
    assert violations(out) == []
    assert finish_reasons(out) == {0: ["stop"]}


def test_nameless_call_named_by_matching_required_parameters() -> None:
    def tool(name: str, required: list[str]) -> dict:
        props = {key: {"type": "string"} for key in required}
        return {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", "properties": props, "required": required},
            },
        }

    tools = [tool("read", ["path"]), tool("search", ["query"])]
    body = sse(
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"query":"x"}'}}]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    (call,) = assembled_calls(repair_stream(body, {"messages": [], "tools": tools}))[0]
    assert call["name"] == "search"


def test_named_tool_choice_names_the_call() -> None:
    body = sse(
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        chunk({}, "stop"),
        "[DONE]",
    )
    request = {
        "messages": [],
        "tool_choice": {"type": "function", "function": {"name": "ping"}},
        "tools": [{"type": "function", "function": {"name": n}} for n in ("ping", "pong")],
    }
    out = repair_stream(body, request)
    assert [c["name"] for c in assembled_calls(out)[0]] == ["ping"]
    assert finish_reasons(out) == {0: ["tool_calls"]}


def test_gemini_repeated_role_kept_only_on_first_delta() -> None:
    body = sse(
        chunk({"role": "assistant", "content": "a"}),
        chunk({"role": "assistant", "content": "b"}),
        chunk({"role": "assistant"}, "stop"),
        "[DONE]",
    )
    out = repair_stream(body)
    roles = [
        c["choices"][0]["delta"].get("role") for c in stream_chunks(out) if isinstance(c, dict)
    ]
    assert roles == ["assistant", None, None]


def test_late_signature_in_incremental_mode_follows_the_opened_call() -> None:
    body = sse(
        chunk(
            {
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]
            }
        ),
        chunk({"tool_calls": [{"extra_content": {"google": {"thought_signature": "S"}}}]}),
        chunk({}, "stop"),
        "[DONE]",
    )
    out = repair_stream(body, emit="incremental")
    assert violations(out, "incremental") == []
    (call,) = assembled_calls(out)[0]
    assert call["extra_content"] == {"google": {"thought_signature": "S"}}


def test_two_empty_id_calls_in_separate_chunks_stay_two_calls() -> None:
    def opening(name: str, args: str) -> dict:
        return chunk(
            {
                "tool_calls": [
                    {"id": "", "type": "function", "function": {"name": name, "arguments": args}}
                ]
            }
        )

    body = sse(opening("read", '{"p":1}'), opening("read", '{"p":2}'), chunk({}, "stop"), "[DONE]")
    calls = assembled_calls(repair_stream(body))[0]
    assert [orjson.loads(c["arguments"]) for c in calls] == [{"p": 1}, {"p": 2}]
    assert len({c["id"] for c in calls}) == 2


def test_signature_before_its_call_is_adopted_by_the_call() -> None:
    body = sse(
        chunk({"tool_calls": [{"extra_content": {"google": {"thought_signature": "S"}}}]}),
        chunk(
            {
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]
            }
        ),
        chunk({}, "stop"),
        "[DONE]",
    )
    tools = [{"type": "function", "function": {"name": "f"}}]
    (call,) = assembled_calls(repair_stream(body, {"messages": [], "tools": tools}))[0]
    assert (call["id"], call["name"]) == ("a", "f")
    assert call["extra_content"] == {"google": {"thought_signature": "S"}}


def test_signature_with_no_call_at_all_invents_no_call() -> None:
    body = sse(
        chunk(
            {
                "content": "hi",
                "tool_calls": [{"extra_content": {"google": {"thought_signature": "S"}}}],
            }
        ),
        chunk({}, "stop"),
        "[DONE]",
    )
    tools = [{"type": "function", "function": {"name": "f"}}]
    out = repair_stream(body, {"messages": [], "tools": tools})
    assert assembled_calls(out) == {}
    assert finish_reasons(out) == {0: ["stop"]}
