"""Content given as an array of parts (proxy/repair/content_parts.py, applied by ToolCallRepair):
thinking and text blocks are flattened into `reasoning_content` and `content` and counted, an
unknown block goes on as received. Edges the transcripts do not show (tests/transcripts/ has the
shapes themselves: mistral_*, dashscope_*, glm_*, gateway_*, minimax_*, snowflake_*, openrouter_*).
"""

from __future__ import annotations

from proxy.repair.conformance import stream_chunks, violations
from tests.support.streams import content, repair_stream, sse

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


def test_flattened_content_blocks_are_counted() -> None:
    # Every change the proxy makes has a kind and a count.
    from proxy.repair.repairs.content_parts import ContentPartsRepair
    from proxy.repair.tally import Tally

    exchange = Tally("r")
    repair = ContentPartsRepair(exchange)
    blocks = [{"type": "thinking", "thinking": "Hm."}, {"type": "text", "text": "Yes."}]
    assert repair.on_chunk(chunk({"content": blocks})) is not None
    assert repair.on_chunk(chunk({"content": [{"type": "image_url"}]})) is None
    assert exchange.repairs["content_blocks_flattened"] == 1
