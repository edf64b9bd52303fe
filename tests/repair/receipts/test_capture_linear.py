"""Receipt capture is linear in the number of pieces.

DeepSeek streams reasoning a few characters per delta; a long answer has tens of thousands of
them. Built by `+=`, every piece copies the whole text so far: quadratic work on the event loop
(40,000 deltas took 5.8 s and stalled /healthz for 1.9 s). Timing would make a flaky test, so
these count memory instead: for each piece fed, tracemalloc's peak above what was held before
the call is what that call had to allocate at once. Summed over the pieces, that is about the
text's size when the text is built once, and about N/2 times it when every piece copies it all
(100-byte pieces, 10,000 of them: 5 GB against 1 MB).
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Callable, Iterable
from typing import Any

from proxy.repair.forwarded import Forwarded
from proxy.repair.profiles import PROFILES, ReceiptRule
from proxy.repair.receipts.capture import FieldBuilder
from proxy.repair.repairs.receipt_capture import ReceiptCapture
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope
from proxy.store.memory_store import MemoryStore

CONCAT = ReceiptRule("reasoning_content", ("reasoning_content",), "tool_turn", "concat")
BY_INDEX = ReceiptRule("reasoning_details", ("reasoning_details",), "tool_turn", "by_index")
PIECE = 100
# What the pieces may cost, summed, as a multiple of the text they make (list slots, the join,
# the odd resize of a list): linear building stays well under it, quadratic is N/2 times over.
LINEAR_FACTOR = 8


def piece(n: int) -> str:
    """`PIECE` characters, different for every n, so a mixed-up order shows."""
    return f"{n:08d}".ljust(PIECE, "r")


def transient_bytes(call: Callable[[Any], object], items: Iterable[Any]) -> int:
    """Sum over `items` of the most memory `call(item)` held at once beyond its start."""
    tracemalloc.start()
    try:
        total = 0
        for item in items:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            call(item)
            total += tracemalloc.get_traced_memory()[1] - before
        return total
    finally:
        tracemalloc.stop()


# ── exact, at the size that stalled the proxy ────────────────────────────────


def test_forty_thousand_reasoning_pieces_make_the_exact_text() -> None:
    pieces = [piece(n) for n in range(40_000)]
    builder = FieldBuilder(CONCAT)
    for text in pieces:
        builder.feed({"reasoning_content": text})
    expected = "".join(pieces)
    assert builder.value() == expected
    assert builder.value() == expected  # asked twice: the same
    builder.feed({"reasoning_content": "+more"})
    assert builder.value() == expected + "+more"  # fed after a value(): still grows


def test_forty_thousand_reasoning_details_pieces_make_the_exact_entries() -> None:
    builder = FieldBuilder(BY_INDEX)
    texts, data = [], []
    for n in range(40_000):
        texts.append(piece(n))
        data.append(str(n))
        builder.feed(
            {
                "reasoning_details": [
                    {"type": "reasoning.text", "text": texts[-1], "index": 0},
                    {"type": "reasoning.encrypted", "data": data[-1], "index": 1},
                ]
            }
        )
    assert builder.value() == [
        {"type": "reasoning.text", "text": "".join(texts), "index": 0},
        {"type": "reasoning.encrypted", "data": "".join(data), "index": 1},
    ]


def test_a_text_field_replaced_by_a_non_text_value_starts_anew() -> None:
    builder = FieldBuilder(BY_INDEX)
    for text in ("a", "b", None, "c", "d"):
        builder.feed({"reasoning_details": [{"type": "t", "text": text, "index": 0}]})
    assert builder.value() == [{"type": "t", "text": "cd", "index": 0}]
    builder.feed({"reasoning_details": [{"type": "t", "text": "e", "index": 0}]})
    assert builder.value() == [{"type": "t", "text": "cde", "index": 0}]


def test_concat_after_a_non_text_value_starts_anew() -> None:
    builder = FieldBuilder(CONCAT)
    for value in ("a", {"odd": True}, "b", "c"):
        builder.feed({"reasoning_content": value})
    assert builder.value() == "bc"


# ── linear: what feeding allocates ───────────────────────────────────────────


def test_concat_allocates_linearly_in_the_pieces() -> None:
    # Fails on `self._value = previous + value`: about 5 GB over these 10,000 pieces.
    sources = [{"reasoning_content": piece(n)} for n in range(10_000)]
    builder = FieldBuilder(CONCAT)
    spent = transient_bytes(builder.feed, sources)
    final = len(builder.value())
    assert final == 10_000 * PIECE
    assert spent <= LINEAR_FACTOR * final, f"{spent:,} bytes allocated for {final:,}"


def test_by_index_text_fields_allocate_linearly_in_the_pieces() -> None:
    # Fails on `entry[name] += value`.
    sources = [
        {"reasoning_details": [{"type": "reasoning.text", "text": piece(n), "index": 0}]}
        for n in range(10_000)
    ]
    builder = FieldBuilder(BY_INDEX)
    spent = transient_bytes(builder.feed, sources)
    final = len(builder.value()[0]["text"])
    assert final == 10_000 * PIECE
    assert spent <= LINEAR_FACTOR * final, f"{spent:,} bytes allocated for {final:,}"


def test_a_deepseek_stream_is_captured_in_linear_memory_and_exactly() -> None:
    # The whole capture path, chunk by chunk as the proxy runs it, then the receipt it stores.
    store = MemoryStore(10, 3600)
    sent = Forwarded(
        {"messages": [{"role": "user", "content": "go"}]},
        RouteRules(PROFILES["deepseek"]),
        ReceiptScope("t", "u"),
    )
    repair = ReceiptCapture(sent, Tally("r"), store, max_value_bytes=2_000_000)
    pieces = [piece(n) for n in range(10_000)]
    chunks = [{"choices": [{"index": 0, "delta": {"reasoning_content": text}}]} for text in pieces]
    spent = transient_bytes(repair.on_chunk, chunks)
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}}
    repair.on_chunk({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    asyncio.run(repair.on_end())
    final = len(pieces) * PIECE
    assert spent <= LINEAR_FACTOR * final, f"{spent:,} bytes allocated for {final:,}"
    (stored,) = asyncio.run(store.get_many(list(store._entries))).values()
    assert stored == {"reasoning_content": "".join(pieces)}
