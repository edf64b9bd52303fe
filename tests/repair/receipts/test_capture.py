"""Receipt capture in-process (proxy/repair/receipts/capture.py): FieldBuilder merges streamed
pieces by `concat`, `last` and `by_index`, and a non-streamed array comes out as it went in.
"""

from __future__ import annotations

import copy
from typing import Any

from proxy.repair.profiles import ReceiptRule
from proxy.repair.receipts.capture import FieldBuilder

CONCAT = ReceiptRule("reasoning_content", ("reasoning_content",), "tool_turn", "concat")
BY_INDEX = ReceiptRule("reasoning_details", ("reasoning_details",), "tool_turn", "by_index")
LAST = ReceiptRule("x", ("extra", "value"), "call", "last")


def built(rule: ReceiptRule, *sources: dict[str, Any]) -> Any:
    builder = FieldBuilder(rule)
    for source in sources:
        builder.feed(copy.deepcopy(source))
    return builder.value()


def test_concat_joins_pieces_and_skips_absent_and_null() -> None:
    pieces = [
        {"reasoning_content": ""},
        {"reasoning_content": "Let me "},
        {"content": "text only"},
        {"reasoning_content": None},
        {"reasoning_content": "think.\n"},
        {"reasoning_content": "Done: é∑"},
    ]
    assert built(CONCAT, *pieces) == "Let me think.\nDone: é∑"


def test_concat_of_nothing_is_none_and_of_empty_pieces_is_empty() -> None:
    assert built(CONCAT) is None
    assert built(CONCAT, {"content": "x"}, {"reasoning_content": None}) is None
    assert built(CONCAT, {"reasoning_content": ""}) == ""


def test_concat_survives_a_non_string_piece() -> None:
    # An upstream that sends garbage must not break capture (the pipeline must never raise).
    assert built(CONCAT, {"reasoning_content": "a"}, {"reasoning_content": 7}) is not None
    built(CONCAT, {"reasoning_content": {"odd": True}}, {"reasoning_content": "b"})


def test_last_keeps_the_last_value() -> None:
    sources = [{"extra": {"value": "one"}}, {"extra": {}}, {"extra": {"value": "two"}}]
    assert built(LAST, *sources) == "two"


def test_by_index_concatenates_text_fields_and_takes_other_fields_as_received() -> None:
    deltas = [
        {
            "reasoning_details": [
                {
                    "type": "reasoning.text",
                    "text": "First ",
                    "format": "google-gemini-v1",
                    "id": "rs_1",
                    "index": 0,
                }
            ]
        },
        {"reasoning_details": [{"type": "reasoning.text", "text": "second ", "index": 0}]},
        {
            "reasoning_details": [
                {"type": "reasoning.text", "text": "third.", "signature": "SIG", "index": 0}
            ]
        },
        {"reasoning_details": [{"type": "reasoning.summary", "summary": "Sum", "index": 1}]},
        {"reasoning_details": [{"type": "reasoning.summary", "summary": "mary", "index": 1}]},
        {"reasoning_details": [{"type": "reasoning.encrypted", "data": "AAAA", "index": 2}]},
        {"reasoning_details": [{"type": "reasoning.encrypted", "data": "BBBB", "index": 2}]},
    ]
    assert built(BY_INDEX, *deltas) == [
        {
            "type": "reasoning.text",
            "text": "First second third.",
            "format": "google-gemini-v1",
            "id": "rs_1",
            "index": 0,
            "signature": "SIG",
        },
        {"type": "reasoning.summary", "summary": "Summary", "index": 1},
        {"type": "reasoning.encrypted", "data": "AAAABBBB", "index": 2},
    ]


def test_by_index_other_fields_are_replaced_not_concatenated() -> None:
    deltas = [
        {"reasoning_details": [{"type": "reasoning.text", "text": "a", "format": "f", "index": 0}]},
        {"reasoning_details": [{"type": "reasoning.text", "text": "b", "format": "f", "index": 0}]},
    ]
    (entry,) = built(BY_INDEX, *deltas)
    assert (entry["type"], entry["format"], entry["text"]) == ("reasoning.text", "f", "ab")


def test_by_index_keeps_the_order_of_first_appearance() -> None:
    deltas = [
        {"reasoning_details": [{"type": "reasoning.encrypted", "data": "D", "index": 1}]},
        {"reasoning_details": [{"type": "reasoning.text", "text": "T", "index": 0}]},
        {"reasoning_details": [{"type": "reasoning.encrypted", "data": "2", "index": 1}]},
        {"reasoning_details": [{"type": "reasoning.text", "text": "2", "index": 0}]},
    ]
    assert [(e["index"], e.get("text") or e.get("data")) for e in built(BY_INDEX, *deltas)] == [
        (1, "D2"),
        (0, "T2"),
    ]


def test_by_index_several_entries_in_one_delta() -> None:
    delta = {
        "reasoning_details": [
            {"type": "reasoning.text", "text": "x", "index": 0},
            {"type": "reasoning.encrypted", "data": "y", "index": 1},
        ]
    }
    more = {"reasoning_details": [{"type": "reasoning.text", "text": "z", "index": 0}]}
    assert built(BY_INDEX, delta, more) == [
        {"type": "reasoning.text", "text": "xz", "index": 0},
        {"type": "reasoning.encrypted", "data": "y", "index": 1},
    ]


def test_by_index_unindexed_pieces_are_appended_as_they_come() -> None:
    deltas = [
        {"reasoning_details": [{"type": "reasoning.text", "text": "a", "index": 0}]},
        {"reasoning_details": [{"type": "reasoning.encrypted", "data": "u1"}]},
        {"reasoning_details": [{"type": "reasoning.text", "text": "b", "index": 0}]},
        {"reasoning_details": [{"type": "reasoning.encrypted", "data": "u2"}]},
    ]
    assert built(BY_INDEX, *deltas) == [
        {"type": "reasoning.text", "text": "ab", "index": 0},
        {"type": "reasoning.encrypted", "data": "u1"},
        {"type": "reasoning.encrypted", "data": "u2"},
    ]


def test_by_index_ignores_entries_that_are_not_objects() -> None:
    deltas = [
        {"reasoning_details": ["junk", None, {"type": "reasoning.text", "text": "a", "index": 0}]},
        {"reasoning_details": [7]},
    ]
    assert built(BY_INDEX, *deltas) == [{"type": "reasoning.text", "text": "a", "index": 0}]


def test_by_index_does_not_alias_the_pieces_it_was_fed() -> None:
    piece = {"type": "reasoning.text", "text": "a", "index": 0}
    builder = FieldBuilder(BY_INDEX)
    builder.feed({"reasoning_details": [piece]})
    builder.feed({"reasoning_details": [{"type": "reasoning.text", "text": "b", "index": 0}]})
    assert piece["text"] == "a"
    assert builder.value()[0]["text"] == "ab"


def test_by_index_survives_an_unhashable_index() -> None:
    # An upstream that sends garbage must not break capture (the pipeline must never raise).
    deltas = [
        {"reasoning_details": [{"type": "reasoning.text", "text": "a", "index": [0]}]},
        {"reasoning_details": [{"type": "reasoning.text", "text": "b", "index": {"i": 0}}]},
    ]
    built(BY_INDEX, *deltas)


def test_non_streamed_array_comes_out_as_it_went_in() -> None:
    details = [
        {
            "type": "reasoning.text",
            "text": "T",
            "format": "google-gemini-v1",
            "id": "r",
            "index": 0,
        },
        {"type": "reasoning.encrypted", "data": "D", "format": "google-gemini-v1", "index": 1},
    ]
    assert built(BY_INDEX, {"reasoning_details": details}) == details
