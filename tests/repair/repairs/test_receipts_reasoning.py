"""ReceiptRepair in-process for the reasoning profiles: capture and inject for `deepseek`
(reasoning_content) and `openrouter` (reasoning_details), scoped by tenant and upstream, with
Google's metadata removed for them.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy.repair.profiles import PROFILES, profile_for
from tests.support.receipt_repair import Harness, call, deepseek_stream, delta_chunk, history, plain

DEEPSEEK = PROFILES["deepseek"]
OPENROUTER = PROFILES["openrouter"]


def test_profiles_detected_for_deepseek_and_openrouter() -> None:
    assert profile_for("auto", "https://api.deepseek.com/v1", "deepseek-v4-flash") is DEEPSEEK
    # Behind a host that says nothing, the model name decides nothing: the evidence profile
    # keeps a tool turn's reasoning_content all the same (tests below).
    assert profile_for("auto", "http://127.0.0.1:9/v1", "deepseek-v4-flash") is PROFILES["generic"]
    assert profile_for("auto", "https://openrouter.ai/api/v1", "google/gemini-3") is OPENROUTER
    assert profile_for("openrouter", "http://127.0.0.1:9/api/v1", "x") is OPENROUTER


def test_deepseek_streamed_reasoning_goes_back_verbatim_on_its_tool_turn() -> None:
    h = Harness(DEEPSEEK)
    exchange = h.stream(deepseek_stream(["Let me ", "read ", "it.\né∑"], call("call_00_a")))
    assert exchange.repairs["reasoning_content_captured"] == 1
    messages, exchange = h.request(history(plain("call_00_a")))
    assert messages[1]["reasoning_content"] == "Let me read it.\né∑"
    assert exchange.repairs["reasoning_content_injected"] == 1
    assert exchange.repairs["reasoning_content_missing"] == 0
    # Nothing else changed.
    assert {k: v for k, v in messages[1].items() if k != "reasoning_content"} == history(
        plain("call_00_a")
    )[1]


def test_deepseek_parallel_calls_are_one_turn() -> None:
    h = Harness(DEEPSEEK)
    h.stream(deepseek_stream(["R"], call("call_00_p"), call("call_01_q", "list_dir", 1)))
    messages, _ = h.request(history(plain("call_00_p"), plain("call_01_q", "list_dir")))
    assert messages[1]["reasoning_content"] == "R"
    # The turn is named by all its calls: one of them alone is another turn.
    messages, exchange = h.request(history(plain("call_00_p")))
    assert "reasoning_content" not in messages[1]
    assert exchange.repairs["reasoning_content_missing"] == 1


def test_deepseek_every_tool_turn_in_the_history_gets_its_own() -> None:
    h = Harness(DEEPSEEK)
    h.stream(deepseek_stream(["one"], call("c1")))
    h.stream(deepseek_stream(["two"], call("c2")))
    h.stream(deepseek_stream(["three"], call("c3")))
    messages = [
        *history(plain("c1")),
        {"role": "assistant", "content": "", "tool_calls": [plain("c2")]},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "assistant", "content": "Done.", "reasoning_content": None},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "", "tool_calls": [plain("c3")]},
        {"role": "tool", "tool_call_id": "c3", "content": "ok"},
    ]
    out, exchange = h.request(messages)
    assert [m.get("reasoning_content") for m in out if m.get("tool_calls")] == [
        "one",
        "two",
        "three",
    ]
    assert exchange.repairs["reasoning_content_injected"] == 3
    assert out[5] == messages[5]  # a text turn: nothing to give back


def test_deepseek_text_turns_are_not_captured() -> None:
    h = Harness(DEEPSEEK)
    chunks = [
        delta_chunk({"reasoning_content": "thinking"}),
        delta_chunk({"content": "The answer."}, "stop"),
    ]
    exchange = h.stream(chunks)
    assert len(h.store) == 0
    assert exchange.repairs["reasoning_content_captured"] == 0
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "The answer."},
        {"role": "user", "content": "more"},
    ]
    assert h.request(messages)[0] == messages


def test_deepseek_non_streamed_message_is_captured() -> None:
    h = Harness(DEEPSEEK)
    body = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": "Non-streamed reasoning.",
                    "tool_calls": [plain("call_00_n")],
                },
            }
        ]
    }
    h.respond(body)
    messages, _ = h.request(history(plain("call_00_n")))
    assert messages[1]["reasoning_content"] == "Non-streamed reasoning."


def test_deepseek_client_value_that_differs_goes_back_as_issued() -> None:
    # What the upstream issued for this very turn wins over an altered copy.
    h = Harness(DEEPSEEK)
    h.stream(deepseek_stream(["stored"], call("c1")))
    messages, exchange = h.request(history(plain("c1"), reasoning_content="the client's"))
    assert messages[1]["reasoning_content"] == "stored"
    assert exchange.repairs["reasoning_content_injected"] == 0
    assert exchange.repairs["reasoning_content_restored"] == 1


def test_an_empty_reasoning_content_left_by_a_client_counts_as_missing() -> None:
    # Clients that drop reasoning often leave "" behind; DeepSeek rejects that like a missing one.
    h = Harness(DEEPSEEK)
    h.stream(deepseek_stream(["stored"], call("c1")))
    messages, exchange = h.request(history(plain("c1"), reasoning_content=""))
    assert messages[1]["reasoning_content"] == "stored"
    assert exchange.repairs["reasoning_content_injected"] == 1


def test_deepseek_miss_is_counted_and_nothing_is_invented() -> None:
    h = Harness(DEEPSEEK)
    sent = history(plain("never-seen"))
    messages, exchange = h.request(sent)
    assert messages == sent
    assert exchange.repairs["reasoning_content_missing"] == 1


def test_deepseek_choices_keep_their_own_reasoning() -> None:
    h = Harness(DEEPSEEK)
    chunks = [
        *deepseek_stream(["zero"], call("c-zero"), choice=0),
        *deepseek_stream(["one"], call("c-one"), choice=1),
    ]
    h.stream(chunks)
    assert h.request(history(plain("c-zero")))[0][1]["reasoning_content"] == "zero"
    assert h.request(history(plain("c-one")))[0][1]["reasoning_content"] == "one"


def test_receipts_are_scoped_by_tenant_and_upstream() -> None:
    h = Harness(DEEPSEEK)
    h.stream(deepseek_stream(["tenant one"], call("same")), tenant="t1")
    h.stream(deepseek_stream(["tenant two"], call("same")), tenant="t2")
    h.stream(deepseek_stream(["elsewhere"], call("same")), tenant="t1", upstream="other")
    assert h.request(history(plain("same")), tenant="t1")[0][1]["reasoning_content"] == "tenant one"
    assert h.request(history(plain("same")), tenant="t2")[0][1]["reasoning_content"] == "tenant two"
    out = h.request(history(plain("same")), tenant="t3")[0]
    assert "reasoning_content" not in out[1]


def test_other_profiles_get_no_reasoning_from_a_shared_store() -> None:
    deepseek = Harness(DEEPSEEK)
    deepseek.stream(deepseek_stream(["R"], call("c1")))
    for name in ("openrouter", "openai", "gemini"):
        other = Harness(PROFILES[name])
        other.store = deepseek.store
        messages, exchange = other.request(history(plain("c1")))
        assert "reasoning_content" not in messages[1], name
        assert not any(kind.startswith("reasoning") for kind in exchange.repairs), name


def test_oversized_reasoning_is_not_stored() -> None:
    h = Harness(DEEPSEEK, max_value_bytes=1000)
    exchange = h.stream(deepseek_stream(["x" * 600, "y" * 600], call("big")))
    assert len(h.store) == 0
    assert exchange.repairs["receipt_too_large"] == 1
    assert exchange.repairs["reasoning_content_captured"] == 0


# OpenRouter: pieces as they stream (see tests/support/reasoning_upstreams.py).
TEXT_PIECES = [
    {
        "type": "reasoning.text",
        "text": "I will ",
        "format": "google-gemini-v1",
        "id": "rs_1",
        "index": 0,
    },
    {"type": "reasoning.text", "text": "read ", "format": "google-gemini-v1", "index": 0},
    {"type": "reasoning.text", "text": "the file.", "format": "google-gemini-v1", "index": 0},
]
ENCRYPTED = {
    "type": "reasoning.encrypted",
    "data": "EjQKMgG+Pvb7s6anNtqT",
    "format": "google-gemini-v1",
    "id": "tool_read_file_x",
    "index": 1,
}
MERGED = [
    {
        "type": "reasoning.text",
        "text": "I will read the file.",
        "format": "google-gemini-v1",
        "id": "rs_1",
        "index": 0,
    },
    ENCRYPTED,
]


def openrouter_stream(*calls: dict, text: str | None = None) -> list[dict]:
    role = {"role": "assistant", "content": ""}
    chunks = [delta_chunk({**role, "reasoning_details": [p]}) for p in TEXT_PIECES]
    if calls:
        chunks.append(delta_chunk({**role, "reasoning_details": [ENCRYPTED]}))
        chunks += [delta_chunk({"tool_calls": [c]}) for c in calls]
        chunks.append(delta_chunk({}, "tool_calls"))
    else:
        chunks.append(delta_chunk({"content": text, "reasoning_details": [ENCRYPTED]}))
        chunks.append(delta_chunk({}, "stop"))
    return chunks


def test_openrouter_streamed_pieces_go_back_merged_on_the_tool_turn() -> None:
    h = Harness(OPENROUTER)
    exchange = h.stream(openrouter_stream(call("tool_read_file_x")))
    assert exchange.repairs["reasoning_details_captured"] == 1
    messages, exchange = h.request(history(plain("tool_read_file_x")))
    assert messages[1]["reasoning_details"] == MERGED
    assert exchange.repairs["reasoning_details_injected"] == 1


def test_openrouter_text_turn_round_trips_by_text_and_question() -> None:
    h = Harness(OPENROUTER)
    question = [{"role": "user", "content": "what does it say?"}]
    h.stream(openrouter_stream(text="It says hello."), messages=question)
    later = [
        *question,
        {"role": "assistant", "content": "It says hello."},
        {"role": "user", "content": "thanks"},
    ]
    messages, _ = h.request(later)
    assert messages[1]["reasoning_details"] == MERGED
    # The same answer to another question is another turn.
    other = [{"role": "user", "content": "something else"}, *later[1:]]
    assert "reasoning_details" not in h.request(other)[0][1]


def test_openrouter_non_streamed_array_is_stored_as_received() -> None:
    h = Harness(OPENROUTER)
    details = copy.deepcopy(MERGED)[::-1]  # whatever the order, it is kept
    body = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "reasoning": "I will read the file.",
                    "reasoning_details": details,
                    "tool_calls": [plain("tool_read_file_x")],
                },
            }
        ]
    }
    h.respond(body)
    assert h.request(history(plain("tool_read_file_x")))[0][1]["reasoning_details"] == details


def test_openrouter_client_array_that_differs_goes_back_as_issued() -> None:
    h = Harness(OPENROUTER)
    h.stream(openrouter_stream(call("tool_read_file_x")))
    issued, _ = h.request(history(plain("tool_read_file_x")))
    own = [ENCRYPTED]
    messages, exchange = h.request(history(plain("tool_read_file_x"), reasoning_details=own))
    assert messages[1]["reasoning_details"] == issued[1]["reasoning_details"] != own
    assert exchange.repairs["reasoning_details_restored"] == 1


def test_openrouter_miss_is_left_alone_and_not_counted_as_required() -> None:
    h = Harness(OPENROUTER)
    sent = history(plain("never-seen"))
    messages, exchange = h.request(sent)
    assert messages == sent
    assert not any(kind.endswith("_missing") for kind in exchange.repairs)


def test_openrouter_does_not_capture_or_give_back_deepseek_fields() -> None:
    h = Harness(OPENROUTER)
    h.stream(deepseek_stream(["R"], call("c1")))
    assert len(h.store) == 0
    sent = history(plain("c1"))
    assert h.request(sent)[0] == sent


@pytest.mark.parametrize("profile", [DEEPSEEK, OPENROUTER], ids=["deepseek", "openrouter"])
def test_google_metadata_is_removed_for_reasoning_upstreams(profile: Any) -> None:
    signed = {**plain("c1"), "extra_content": {"google": {"thought_signature": "SIG"}}}
    messages, exchange = Harness(profile).request(history(signed))
    assert "extra_content" not in messages[1]["tool_calls"][0]
    assert exchange.repairs["foreign_metadata_removed"] == 1
