"""Receipts (Gemini thought signatures): capture from responses, inject into follow-ups."""

from __future__ import annotations

import asyncio
import copy

import pytest

from proxy.repair.conformance import stream_chunks
from proxy.repair.forwarded import Forwarded
from proxy.repair.pipeline import RepairChain
from proxy.repair.profiles import PROFILES, SKIP_SIGNATURE_VALIDATOR, profile_for
from proxy.repair.repairs.receipt_capture import ReceiptCapture
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope, tenant_of
from proxy.store.memory_store import MemoryStore
from tests.support.fake_upstream import load_transcript
from tests.support.receipt_repair import receipt_request

GEMINI = PROFILES["gemini"]


def signed(call_id: str, name: str = "read", signature: str | None = None) -> dict:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
    if signature:
        call["extra_content"] = {"google": {"thought_signature": signature}}
    return call


def signature_of(obj: dict) -> str | None:
    return ((obj.get("extra_content") or {}).get("google") or {}).get("thought_signature")


class Harness:
    """One store shared by successive exchanges, as in the running proxy."""

    def __init__(self, profile=GEMINI, tenant: str = "t1", placeholder: bool = True) -> None:
        self.store = MemoryStore(1000, 3600)
        self.profile = profile
        self.tenant = tenant
        self.placeholder = placeholder

    def repair(
        self, tenant: str | None = None, messages: list | None = None
    ) -> tuple[ReceiptCapture, Tally]:
        sent = Forwarded(
            {"messages": messages or []},
            RouteRules(self.profile),
            ReceiptScope(tenant or self.tenant, "u"),
        )
        tally = Tally("r")
        return ReceiptCapture(sent, tally, self.store), tally

    def stream(
        self, chunks: list[dict], tenant: str | None = None, messages: list | None = None
    ) -> Tally:
        repair, tally = self.repair(tenant, messages)
        for chunk in chunks:
            assert repair.on_chunk(copy.deepcopy(chunk)) is None  # capture never edits
        asyncio.run(repair.on_end())
        return tally

    def request(self, messages: list[dict], tenant: str | None = None) -> tuple[list, Tally]:
        body = {"messages": copy.deepcopy(messages)}
        rules, scope = RouteRules(self.profile), ReceiptScope(tenant or self.tenant, "u")
        tally = receipt_request(self.store, rules, scope, body, self.placeholder)
        return body["messages"], tally


def call_chunk(*calls: dict, finish: str | None = None) -> dict:
    entries = [{"index": i, **call} for i, call in enumerate(calls)]
    return {"choices": [{"index": 0, "delta": {"tool_calls": entries}, "finish_reason": finish}]}


def follow_up(*calls: dict, older: list[dict] | None = None) -> list[dict]:
    results = [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
    return [
        *(older or []),
        {"role": "user", "content": "do it"},
        {"role": "assistant", "content": None, "tool_calls": list(calls)},
        *results,
    ]


def test_captured_signature_goes_back_on_that_exact_call() -> None:
    h = Harness()
    h.stream([call_chunk(signed("a1", signature="SIG-A"))])
    messages, exchange = h.request(follow_up(signed("a1")))
    assert signature_of(messages[1]["tool_calls"][0]) == "SIG-A"
    assert exchange.repairs["signatures_injected"] == 1
    assert exchange.repairs["signatures_placeholders"] == 0


def test_parallel_calls_signature_only_on_the_first() -> None:
    h = Harness()
    h.stream([call_chunk(signed("p1", signature="SIG-P"), signed("p2"))])
    messages, _ = h.request(follow_up(signed("p1"), signed("p2")))
    calls = messages[1]["tool_calls"]
    assert [signature_of(c) for c in calls] == ["SIG-P", None]


def test_every_step_of_a_multi_step_turn_gets_its_own_signature() -> None:
    h = Harness()
    h.stream([call_chunk(signed("s1", signature="SIG-1"))])
    h.stream([call_chunk(signed("s2", signature="SIG-2"))])
    history = [
        *follow_up(signed("s1")),
        {"role": "assistant", "tool_calls": [signed("s2")]},
        {"role": "tool", "tool_call_id": "s2", "content": "ok"},
    ]
    messages, _ = h.request(history)
    assert signature_of(messages[1]["tool_calls"][0]) == "SIG-1"
    assert signature_of(messages[3]["tool_calls"][0]) == "SIG-2"


def test_a_signature_the_client_altered_goes_back_as_issued() -> None:
    h = Harness()
    h.stream([call_chunk(signed("a1", signature="STORED"))])
    messages, exchange = h.request(follow_up(signed("a1", signature="CLIENT")))
    assert signature_of(messages[1]["tool_calls"][0]) == "STORED"
    assert exchange.repairs["signatures_injected"] == 0
    assert exchange.repairs["signatures_restored"] == 1


def test_signature_arriving_in_a_later_delta_is_captured() -> None:
    h = Harness()
    late = {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "function": {"arguments": ""},
                            "extra_content": {"google": {"thought_signature": "LATE"}},
                        }
                    ]
                },
            }
        ]
    }
    h.stream([call_chunk(signed("a1")), late])
    messages, _ = h.request(follow_up(signed("a1")))
    assert signature_of(messages[1]["tool_calls"][0]) == "LATE"


def test_tenants_never_see_each_others_signatures_even_with_the_same_call_id() -> None:
    h = Harness()
    h.stream([call_chunk(signed("same", signature="SIG-T1"))], tenant="t1")
    h.stream([call_chunk(signed("same", signature="SIG-T2"))], tenant="t2")
    mine, _ = h.request(follow_up(signed("same")), tenant="t1")
    theirs, _ = h.request(follow_up(signed("same")), tenant="t2")
    stranger, _ = h.request(follow_up(signed("same")), tenant="t3")
    assert signature_of(mine[1]["tool_calls"][0]) == "SIG-T1"
    assert signature_of(theirs[1]["tool_calls"][0]) == "SIG-T2"
    assert signature_of(stranger[1]["tool_calls"][0]) == SKIP_SIGNATURE_VALIDATOR


def test_unknown_current_turn_step_gets_placeholder_older_turns_left_alone() -> None:
    h = Harness()
    older = [*follow_up(signed("old")), {"role": "assistant", "content": "done"}]
    messages, exchange = h.request(follow_up(signed("new1"), signed("new2"), older=older))
    assert "extra_content" not in messages[1]["tool_calls"][0]  # older turn unchanged
    current = messages[len(older) + 1]["tool_calls"]
    assert [signature_of(c) for c in current] == [SKIP_SIGNATURE_VALIDATOR, None]
    assert exchange.repairs["signatures_placeholders"] == 1


def test_on_missing_leave_puts_no_placeholder() -> None:
    h = Harness(placeholder=False)
    messages, _ = h.request(follow_up(signed("new")))
    assert "extra_content" not in messages[1]["tool_calls"][0]


def test_tool_result_is_not_a_new_turn_but_user_text_is() -> None:
    h = Harness()
    history = [
        *follow_up(signed("x")),
        {"role": "user", "content": [{"type": "text", "text": "next"}]},
    ]
    messages, _ = h.request(history)
    assert "extra_content" not in messages[1]["tool_calls"][0]  # the turn is over


def test_text_turn_signature_round_trips_by_text() -> None:
    h = Harness()
    text = load_transcript("gemini_text_thought_signature")
    chunks = [c for c in stream_chunks(text.sse) if isinstance(c, dict)]
    h.stream(chunks, messages=[{"role": "user", "content": "q"}])
    answer = "".join(
        (c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices")
    )
    messages, _ = h.request(
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "more"},
        ]
    )
    assert signature_of(messages[1]) == "sig123"


def test_non_streamed_response_is_captured() -> None:
    h = Harness()
    repair, _ = h.repair()
    response = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "tool_calls": [signed("n1", signature="SIG-N")]},
                "finish_reason": "tool_calls",
            }
        ]
    }
    asyncio.run(RepairChain([repair], strict=True).on_response(response))
    messages, _ = h.request(follow_up(signed("n1")))
    assert signature_of(messages[1]["tool_calls"][0]) == "SIG-N"


def test_non_google_upstream_receives_no_google_metadata() -> None:
    h = Harness(profile=PROFILES["openai"])
    history = [
        *follow_up(signed("a", signature="S")),
        {
            "role": "assistant",
            "content": "hi",
            "extra_content": {"google": {"thought_signature": "T"}, "other": 1},
        },
    ]
    messages, exchange = h.request(history)
    assert "extra_content" not in messages[1]["tool_calls"][0]
    assert messages[-1]["extra_content"] == {"other": 1}
    assert exchange.repairs["foreign_metadata_removed"] == 2


def test_oversized_receipt_is_not_stored() -> None:
    h = Harness()
    # Past signatures.max_value_bytes (1 MiB, the one default, also the repair's own).
    h.stream([call_chunk(signed("big", signature="x" * (1_048_576 + 1)))])
    assert len(h.store) == 0


@pytest.mark.parametrize(
    ("configured", "base_url", "model", "expected"),
    [
        ("auto", "https://generativelanguage.googleapis.com/v1beta/openai", "x", "gemini"),
        ("auto", "https://us-central1-aiplatform.googleapis.com/v1/projects/p", "x", "vertex"),
        ("auto", "https://openrouter.ai/api/v1", "google/gemini-3-pro", "openrouter"),
        # The model name decides nothing: a host that says nothing gets the evidence profile.
        ("auto", "http://127.0.0.1:9000/v1", "gemini-3-flash-preview", "generic"),
        ("auto", "http://127.0.0.1:9000/v1", "gpt-5", "generic"),
        ("openai", "https://generativelanguage.googleapis.com/v1beta/openai", "gemini", "openai"),
    ],
)
def test_profile_detection(configured, base_url, model, expected) -> None:
    assert profile_for(configured, base_url, model).name == expected


def test_tenant_is_a_hash_of_the_credential_never_the_credential() -> None:
    tenant = tenant_of({"authorization": "Bearer sk-secret"})
    assert "sk-secret" not in tenant and len(tenant) == 32
    assert tenant_of({"x-api-key": "k"}) != tenant_of({"x-api-key": "j"})
    # The tenant header subdivides the credential's tenant, never replaces it.
    assert tenant_of({"x-team": "a", "authorization": "b"}, "x-team") != tenant_of(
        {"x-team": "a", "authorization": "c"}, "x-team"
    )
    assert tenant_of({"x-team": "a"}, "x-team") is None


def test_capture_ignores_unsigned_streams() -> None:
    h = Harness()
    h.stream([call_chunk(signed("u"))])
    assert len(h.store) == 0


def text_answer(text: str, signature: str) -> list[dict]:
    return [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "content": None,
                        "extra_content": {"google": {"thought_signature": signature}},
                    },
                    "finish_reason": "stop",
                }
            ]
        },
    ]


def test_the_same_answer_to_different_questions_keeps_its_own_signature() -> None:
    h = Harness()
    q1, q2 = {"role": "user", "content": "one"}, {"role": "user", "content": "two"}
    answer = {"role": "assistant", "content": "Done."}
    h.stream(text_answer("Done.", "SIG-1"), messages=[q1])
    h.stream(text_answer("Done.", "SIG-2"), messages=[q1, answer, q2])
    history = [q1, dict(answer), q2, dict(answer), {"role": "user", "content": "three"}]
    messages, _ = h.request(history)
    assert [signature_of(m) for m in messages if m["role"] == "assistant"] == ["SIG-1", "SIG-2"]


def test_vertex_namespace_is_captured_returned_and_kept_from_other_upstreams() -> None:
    h = Harness(profile=PROFILES["vertex"])
    vertex_call = signed("v1")
    vertex_call["extra_content"] = {"vertex": {"thought_signature": "SIG-V"}}
    h.stream([call_chunk(vertex_call)])
    messages, _ = h.request(follow_up(signed("v1")))
    call = messages[1]["tool_calls"][0]
    assert call["extra_content"] == {"vertex": {"thought_signature": "SIG-V"}}  # no placeholder

    other = Harness(profile=PROFILES["openai"])
    stripped, _ = other.request(follow_up(vertex_call))
    assert "extra_content" not in stripped[1]["tool_calls"][0]
