"""HistoryRepair: each rule on its own, and a valid history is never changed."""

from __future__ import annotations

import copy
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.repair.repairs.history import NO_RESULT, HistoryRepair
from proxy.repair.tally import Tally
from tests.support.phases import apply


def call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def result(call_id: str, content: str = "ok") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def assistant(*ids: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [call(i) for i in ids]}


USER = {"role": "user", "content": "go"}


def heal(messages: list[dict]) -> tuple[list[dict], bool, Tally]:
    body = {"messages": copy.deepcopy(messages)}
    changed, context = apply(HistoryRepair(), body)
    return body["messages"], changed, context.tally


def test_result_for_a_call_of_another_block_is_dropped() -> None:
    history = [USER, assistant("a"), result("a"), assistant("b"), result("b"), result("a")]
    healed, changed, exchange = heal(history)
    assert changed
    assert healed == history[:-1]
    assert exchange.repairs == {"history_orphan_result_dropped": 1}


def test_result_with_no_block_at_all_is_dropped() -> None:
    healed, changed, _ = heal([USER, result("x"), {"role": "assistant", "content": "hi"}])
    assert changed
    assert healed == [USER, {"role": "assistant", "content": "hi"}]


def test_unanswered_call_gets_a_placeholder_result() -> None:
    healed, changed, exchange = heal([USER, assistant("a", "b"), result("a"), USER])
    assert changed
    assert healed == [USER, assistant("a", "b"), result("a"), result("b", NO_RESULT), USER]
    assert exchange.repairs == {"history_missing_result_added": 1}


def test_duplicate_ids_in_one_message_are_renamed_with_their_results_in_order() -> None:
    history = [USER, assistant("d", "d"), result("d", "first"), result("d", "second")]
    healed, changed, exchange = heal(history)
    assert changed
    ids = [c["id"] for c in healed[1]["tool_calls"]]
    assert ids[0] == "d" and ids[1] != "d" and ids[1].startswith("call_")
    assert healed[2:] == [result("d", "first"), result(ids[1], "second")]
    assert exchange.repairs == {"history_duplicate_id_renamed": 1}
    assert heal(history)[0] == healed  # deterministic


def test_second_copy_of_a_result_is_dropped() -> None:
    history = [USER, assistant("a"), result("a", "1"), result("a", "2")]
    healed, changed, exchange = heal(history)
    assert changed
    assert healed == history[:-1]
    assert exchange.repairs == {"history_duplicate_result_dropped": 1}


def test_the_open_webui_broken_round_is_healed() -> None:
    round_one = ["functions.add_memory:0", *(f"functions.search_web:{n}" for n in range(1, 5))]
    history = [
        USER,
        assistant(*round_one),
        *map(result, round_one),
        assistant("functions.search_web:0"),
        *(result(f"functions.search_web:{n}") for n in range(5)),
    ]
    healed, changed, _ = heal(history)
    assert changed
    assert healed == [
        *history[:7],
        assistant("functions.search_web:0"),
        result("functions.search_web:0"),
    ]


def test_repair_can_be_turned_off() -> None:
    from proxy.repair.repairs import request_repairs
    from proxy.settings.chain import chain_options
    from proxy.settings.schema import Settings
    from proxy.store.memory_store import MemoryStore

    repairs = request_repairs(
        chain_options(Settings().with_values({"history.repair": False})), MemoryStore(1, 1)
    )
    assert not any(isinstance(r, HistoryRepair) for r in repairs)


@st.composite
def valid_histories(draw) -> list[dict]:
    messages: list[dict] = []
    counter = 0
    for _ in range(draw(st.integers(0, 5))):
        messages.append({"role": "user", "content": draw(st.text(max_size=5))})
        for _ in range(draw(st.integers(0, 3))):
            ids = [f"c{counter + i}" for i in range(draw(st.integers(1, 3)))]
            counter += len(ids)
            results = [result(i) for i in draw(st.permutations(ids))]
            messages += [assistant(*ids), *results]
        if draw(st.booleans()):
            messages.append({"role": "assistant", "content": draw(st.text(max_size=5))})
    return messages


@settings(max_examples=200, deadline=None)
@given(valid_histories())
def test_a_valid_history_is_never_changed(history: list[dict]) -> None:
    healed, changed, exchange = heal(history)
    assert not changed
    assert healed == history
    assert not exchange.repairs


def test_an_id_reused_by_a_later_block_is_renamed_with_its_result() -> None:
    history = [USER, assistant("k:0"), result("k:0", "one"), assistant("k:0"), result("k:0", "two")]
    healed, changed, _ = heal(history)
    assert changed
    renamed = healed[3]["tool_calls"][0]["id"]
    assert renamed != "k:0" and renamed.startswith("call_")
    assert healed[4] == result(renamed, "two")
    assert healed[:3] == history[:3]


def test_two_messages_repeating_the_same_id_get_distinct_new_ids() -> None:
    history = [
        USER,
        assistant("x", "x"),
        result("x"),
        result("x"),
        assistant("x", "x"),
        result("x"),
        result("x"),
    ]
    healed, _, _ = heal(history)
    ids = [c["id"] for m in healed if m["role"] == "assistant" for c in m["tool_calls"]]
    assert len(set(ids)) == 4


def test_results_of_an_untouched_block_keep_their_order() -> None:
    history = [USER, assistant("a", "b"), result("b"), result("a"), assistant("c"), USER]
    healed, changed, _ = heal(history)
    assert changed
    assert healed[2:4] == [result("b"), result("a")]


def test_a_duplicate_kimi_id_keeps_its_shape_with_an_n_the_conversation_does_not_use() -> None:
    history = [
        USER,
        assistant("functions.get_weather:0"),
        result("functions.get_weather:0", "sunny"),
        assistant("functions.get_weather:0", "functions.get_weather:0"),
        result("functions.get_weather:0", "rainy"),
        result("functions.get_weather:0", "windy"),
        assistant("functions.read_file:3"),
        result("functions.read_file:3"),
    ]
    healed, changed, tally = heal(history)
    assert changed
    assert tally.repairs == {"history_duplicate_id_renamed": 2}
    # One past the highest N anywhere in the conversation, later blocks included.
    assert healed[3]["tool_calls"][0]["id"] == "functions.get_weather:4"
    assert healed[3]["tool_calls"][1]["id"] == "functions.get_weather:5"
    assert healed[4] == result("functions.get_weather:4", "rainy")
    assert healed[5] == result("functions.get_weather:5", "windy")
    assert healed[6:] == history[6:]


def test_an_id_of_another_shape_still_becomes_call_hex() -> None:
    history = [USER, assistant("toolu_01", "toolu_01"), result("toolu_01"), result("toolu_01")]
    healed, _, _ = heal(history)
    renamed = healed[1]["tool_calls"][1]["id"]
    assert re.fullmatch(r"call_[0-9a-f]{24}", renamed)
    assert healed[3] == result(renamed)
