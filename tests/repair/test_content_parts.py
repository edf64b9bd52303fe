"""Edges of the issue-14 shapes that the transcripts do not show (tests/transcripts/ has the
shapes themselves: mistral_*, dashscope_*, glm_*, gateway_*, minimax_*, snowflake_*, openrouter_*).
"""

from __future__ import annotations

from proxy.repair.conformance import stream_chunks, violations
from tests.support.streams import content, finish_reasons, repair_stream, sse

ENVELOPE = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(delta: dict, finish: str | None = None, **extra: object) -> dict:
    return {**ENVELOPE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def deltas(body: bytes) -> list[dict]:
    return [
        item["choices"][0]["delta"]
        for item in stream_chunks(body)
        if isinstance(item, dict) and item.get("choices")
    ]


def test_content_array_with_an_unknown_block_goes_on_as_received() -> None:
    blocks = [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]
    body = sse(chunk({"role": "assistant", "content": blocks}), chunk({}, "stop"), "[DONE]")
    assert deltas(repair_stream(body))[0]["content"] == blocks


def test_thinking_given_as_a_string_and_text_blocks_are_flattened() -> None:
    blocks = [{"type": "thinking", "thinking": "Hm."}, {"type": "text", "text": "Yes."}]
    body = sse(chunk({"role": "assistant", "content": blocks}), chunk({}, "stop"), "[DONE]")
    out = repair_stream(body)
    first = deltas(out)[0]
    assert (first["content"], first["reasoning_content"]) == ("Yes.", "Hm.")
    assert violations(out) == []


def test_thinking_only_blocks_leave_content_null_and_extend_reasoning_content() -> None:
    blocks = [{"type": "thinking", "thinking": [{"type": "text", "text": " more"}]}]
    body = sse(
        chunk({"role": "assistant", "reasoning_content": "some", "content": blocks}),
        chunk({"content": "ok"}, "stop"),
        "[DONE]",
    )
    out = repair_stream(body)
    first = deltas(out)[0]
    assert (first["content"], first["reasoning_content"]) == (None, "some more")
    assert content(out) == {0: "ok"}


def test_real_content_after_a_finish_is_not_dropped() -> None:
    body = sse(chunk({"role": "assistant", "content": "a"}, "stop"), chunk({"content": "b"}))
    out = repair_stream(body + b"data: [DONE]\n\n")
    assert content(out) == {0: "ab"}
    assert finish_reasons(out) == {0: ["stop"]}


def test_usage_after_the_finish_keeps_its_usage_with_an_empty_delta() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    body = sse(
        chunk({"role": "assistant", "content": "a"}, "stop"),
        chunk({"role": "assistant", "content": ""}, usage=usage),
        "[DONE]",
    )
    out = repair_stream(body)
    last = [item for item in stream_chunks(out) if isinstance(item, dict)][-1]
    assert last["usage"] == usage and last["choices"][0]["delta"] == {}
    assert violations(out) == []


def test_flattened_content_blocks_are_counted() -> None:
    # Every change the proxy makes has a kind and a count.
    from proxy.repair.exchange import Exchange
    from proxy.repair.repairs.tool_calls import ToolCallRepair

    exchange = Exchange("r")
    repair = ToolCallRepair(exchange)
    blocks = [{"type": "thinking", "thinking": "Hm."}, {"type": "text", "text": "Yes."}]
    assert repair.on_chunk(chunk({"content": blocks})) is not None
    assert repair.on_chunk(chunk({"content": [{"type": "image_url"}]})) is None
    assert exchange.repairs["content_blocks_flattened"] == 1


def test_the_checker_wants_the_role_on_the_first_delta() -> None:
    # GLM through Mistral's API never sends a role: the OpenAI SDK's stream helper then ends
    # with message.role None. The checker (tests, `streamfix replay`, bench/corpus.py) says so.
    body = sse(chunk({"content": "a"}), chunk({}, "stop"), "[DONE]")
    assert "chunk 0: choice 0: the first delta carries no role" in violations(body)
    assert violations(repair_stream(body)) == []
