"""ReusedCallIdRepair: ids reused across rounds become unique; others are never touched."""

from __future__ import annotations

import asyncio
import re

from proxy.repair.pipeline import RepairChain
from proxy.repair.repairs.call_ids import ReusedCallIdRepair
from proxy.repair.tally import Tally
from tests.support.fake_upstream import load_transcript
from tests.support.phases import forwarded
from tests.support.streams import assembled_calls, repair_stream, sse

VALID = re.compile(r"[A-Za-z0-9_.:-]{1,40}")


def history_with(*ids: str) -> list[dict]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    results = [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids]
    return [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": calls}, *results]


KIMI = load_transcript("kimi_per_round_ids")


def kimi_round_two(history_ids: tuple[str, ...]) -> list[dict]:
    request = {**KIMI.meta["request"], "messages": history_with(*history_ids)}
    return assembled_calls(repair_stream(KIMI.sse, request))[0]


def test_first_round_ids_are_untouched() -> None:
    calls = kimi_round_two(())
    assert [c["id"] for c in calls] == ["functions.search_web:0", "functions.read_file:1"]


def test_reused_kimi_ids_get_the_next_unused_number() -> None:
    calls = kimi_round_two(("functions.search_web:0", "functions.read_file:1"))
    assert [c["id"] for c in calls] == ["functions.search_web:2", "functions.read_file:3"]


def test_only_colliding_ids_change_and_results_are_deterministic() -> None:
    history = ("functions.search_web:0", "functions.add_memory:7")
    first = [c["id"] for c in kimi_round_two(history)]
    assert first == ["functions.search_web:8", "functions.read_file:1"]
    assert [c["id"] for c in kimi_round_two(history)] == first


def test_other_id_shapes_become_call_hex_within_40_characters() -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "toolu_" + "x" * 30,
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        },
                        {
                            "id": "fresh",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        },
                    ],
                },
            }
        ]
    }
    exchange = Tally("r")
    sent = forwarded({"messages": history_with("toolu_" + "x" * 30)})
    link = ReusedCallIdRepair(sent, exchange)
    assert asyncio.run(RepairChain([link], strict=True).on_response(body))
    ids = [c["id"] for c in body["choices"][0]["message"]["tool_calls"]]
    assert re.fullmatch(r"call_[0-9a-f]{24}", ids[0])
    assert ids[1] == "fresh"
    assert all(VALID.fullmatch(i) for i in ids)
    assert exchange.repairs == {"call_id_reused": 1}


def test_a_duplicate_within_one_response_is_renamed() -> None:
    body = {
        "choices": [
            {
                "index": i,
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "same",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
            }
            for i in range(2)
        ]
    }
    link = ReusedCallIdRepair(forwarded({"messages": []}), Tally("r"))
    asyncio.run(RepairChain([link], strict=True).on_response(body))
    ids = [c["message"]["tool_calls"][0]["id"] for c in body["choices"]]
    assert ids[0] == "same" and ids[1] != "same"


def test_incremental_follow_up_deltas_keep_pointing_at_the_renamed_call() -> None:
    request = {**KIMI.meta["request"], "messages": history_with("functions.search_web:0")}
    out = repair_stream(KIMI.sse, request, emit="incremental")
    calls = assembled_calls(out)[0]
    # Renamed when first seen, before read_file:1 arrived: the next number then was 1.
    assert [c["id"] for c in calls] == ["functions.search_web:1", "functions.read_file:1"]
    assert [c["name"] for c in calls] == ["search_web", "read_file"]


def test_parallel_calls_sharing_one_id_in_a_stream_both_arrive_renamed() -> None:
    def entry(index: int, **fields) -> dict:
        return {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, **fields}]}}]}

    same = "functions.search_web:0"
    opening = {"id": same, "type": "function", "function": {"name": "search_web", "arguments": ""}}
    body = sse(
        entry(0, **opening),
        entry(0, function={"arguments": '{"query":"a"}'}),
        entry(1, **opening),
        entry(1, function={"arguments": '{"query":"b"}'}),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        "[DONE]",
    )
    for emit in ("auto", "atomic", "incremental"):
        calls = assembled_calls(repair_stream(body, {"messages": []}, emit=emit))[0]
        assert [(c["id"], c["arguments"]) for c in calls] == [
            (same, '{"query":"a"}'),
            ("functions.search_web:1", '{"query":"b"}'),
        ], emit
