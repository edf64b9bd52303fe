"""FinishReasonRepair (proxy/repair/repairs/finish_reason.py): exactly one, correct finish per
choice. "stop" after calls becomes "tool_calls", "tool_calls" with every call left out becomes
"stop", a missing finish is supplied when the upstream ended cleanly, a repeated finish goes, and
after the finish an empty delta is emptied (its chunk kept for the usage) while real content goes
on as received.

The first tests drive the repair on its own; the rest run the whole strict chain in-process
(`repair_stream`), gathered here from the tool-call and content-part suites.
"""

from __future__ import annotations

import asyncio

from proxy.repair.conformance import stream_chunks, violations
from proxy.repair.pipeline import RepairChain
from proxy.repair.repairs.finish_reason import FinishReasonRepair
from proxy.repair.tally import Tally
from tests.support.streams import content, finish_reasons, repair_stream, sse

ENVELOPE = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
TOOL_ENVELOPE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
CALL = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def chunk(delta: dict, finish: str | None = None, **extra: object) -> dict:
    """A chunk whose choice always carries `finish_reason` (null when not given)."""
    return {**ENVELOPE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def tool_chunk(delta: dict, finish: str | None = None, index: int = 0) -> dict:
    """A chunk whose choice carries `finish_reason` only when given."""
    choice = {"index": index, "delta": delta}
    if finish:
        choice["finish_reason"] = finish
    return {**TOOL_ENVELOPE, "choices": [choice]}


# ── the repair on its own ────────────────────────────────────────────────────


def counted() -> tuple[FinishReasonRepair, Tally]:
    exchange = Tally(request_id="test")
    return FinishReasonRepair(exchange), exchange


def test_stop_after_calls_becomes_tool_calls() -> None:
    repair, exchange = counted()
    assert repair.on_chunk(chunk({"role": "assistant", "tool_calls": [CALL]})) is None
    (out,) = repair.on_chunk(chunk({}, "stop"))
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert asyncio.run(repair.on_end()) == []
    assert exchange.repairs == {"finish_reason_rewritten": 1}


def test_tool_calls_without_any_call_becomes_stop() -> None:
    repair, exchange = counted()
    (out,) = repair.on_chunk(chunk({"role": "assistant", "content": ""}, "tool_calls"))
    assert out["choices"][0]["finish_reason"] == "stop"
    assert exchange.repairs == {"finish_reason_rewritten": 1}


def test_a_correct_finish_is_left_alone() -> None:
    repair, exchange = counted()
    assert repair.on_chunk(chunk({"role": "assistant", "content": "a"})) is None
    assert repair.on_chunk(chunk({}, "stop")) is None
    assert asyncio.run(repair.on_end()) == []
    assert not exchange.repairs


def test_a_missing_finish_is_supplied_at_the_end_per_choice() -> None:
    repair, exchange = counted()
    repair.on_chunk(chunk({"role": "assistant", "tool_calls": [CALL]}))
    repair.on_chunk({**ENVELOPE, "choices": [{"index": 1, "delta": {"content": "x"}}]})
    ends = asyncio.run(repair.on_end())
    assert [(c["choices"][0]["index"], c["choices"][0]["finish_reason"]) for c in ends] == [
        (0, "tool_calls"),
        (1, "stop"),
    ]
    assert all(c["id"] == ENVELOPE["id"] and c["choices"][0]["delta"] == {} for c in ends)
    assert exchange.repairs == {"finish_reason_added": 2}


def test_a_second_finish_is_emptied_and_its_chunk_kept() -> None:
    repair, exchange = counted()
    repair.on_chunk(chunk({"role": "assistant", "content": "a"}, "stop"))
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    (out,) = repair.on_chunk(chunk({"content": ""}, "stop", usage=usage))
    assert out["choices"][0] == {"index": 0, "delta": {}, "finish_reason": None}
    assert out["usage"] == usage
    assert exchange.repairs == {
        "finish_reason_repeated_dropped": 1,
        "after_finish_delta_emptied": 1,
    }


def test_a_non_streamed_message_with_calls_finishes_with_tool_calls() -> None:
    repair, exchange = counted()
    body = {"choices": [{"index": 0, "message": {"tool_calls": [CALL]}, "finish_reason": "stop"}]}
    assert asyncio.run(RepairChain([repair], strict=True).on_response(body)) is True
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    text = {"choices": [{"index": 0, "message": {"content": "a"}, "finish_reason": "stop"}]}
    assert asyncio.run(RepairChain([counted()[0]], strict=True).on_response(text)) is False
    missing = {"choices": [{"index": 0, "message": {"tool_calls": [CALL]}, "finish_reason": None}]}
    # A fresh link: the one above has seen choice 0 finish.
    fresh = RepairChain([FinishReasonRepair(exchange)], strict=True)
    assert asyncio.run(fresh.on_response(missing)) is True
    assert missing["choices"][0]["finish_reason"] == "tool_calls"
    assert exchange.repairs == {"finish_reason_rewritten": 1, "finish_reason_added": 1}


# ── through the whole chain ──────────────────────────────────────────────────


def test_upstream_ending_without_finish_or_done_is_cut_not_completed() -> None:
    # A stream that runs out before any finish reason and without [DONE] was cut: the client
    # gets an error event, and neither a finish nor a [DONE] is invented for it.
    body = sse(
        tool_chunk(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        )
    )
    out = repair_stream(body)
    assert finish_reasons(out) == {}
    assert b"[DONE]" not in out
    assert stream_chunks(out)[-1]["error"]["code"] == "upstream_truncated"


def test_upstream_ending_with_done_and_no_finish_gets_one() -> None:
    body = sse(
        tool_chunk(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        ),
        "[DONE]",
    )
    out = repair_stream(body)
    assert violations(out) == []
    assert finish_reasons(out) == {0: ["tool_calls"]}
    assert stream_chunks(out)[-1] == "[DONE]"


def test_repeated_finish_is_sent_once() -> None:
    body = sse(
        tool_chunk({"content": "a"}),
        tool_chunk({}, "stop"),
        tool_chunk({}, "stop"),
        "[DONE]",
        "[DONE]",
    )
    out = repair_stream(body)
    assert violations(out) == []
    assert finish_reasons(out) == {0: ["stop"]}


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
