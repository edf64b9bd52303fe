"""Receipts follow the evidence (the `generic` profile and text digests): behind a host that
says nothing, the evidence profile keeps whatever receipt the upstream issues and returns it to
that upstream and tenant only; the model name decides nothing; Google's placeholder stays with
Google's hosts; a foreign field stays where this very upstream issued it; and a receipt the
client mangled goes back as it was issued.

Driven through ReceiptRepair directly with the harness of tests/support/receipt_repair.py (one
memory store shared by successive exchanges, as in the running proxy)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.repair.profiles import PROFILES, SKIP_SIGNATURE_VALIDATOR, profile_for
from proxy.repair.receipts.injection import TextDigest, text_key
from tests.support.receipt_repair import (
    Harness,
    call,
    deepseek_stream,
    delta_chunk,
    history,
    plain,
)

GENERIC = PROFILES["generic"]


def signed_stream(call_id: str, where: str, signature: str) -> list[dict]:
    entry = {**call(call_id), "extra_content": {where: {"thought_signature": signature}}}
    return [
        delta_chunk({"role": "assistant", "tool_calls": [entry]}),
        delta_chunk({}, "tool_calls"),
    ]


def details_stream(call_id: str, details: list[dict]) -> list[dict]:
    return [
        delta_chunk({"role": "assistant", "reasoning_details": details}),
        delta_chunk({"tool_calls": [call(call_id)]}),
        delta_chunk({}, "tool_calls"),
    ]


@pytest.mark.parametrize("model", ["my-model", "google/gemini-3-pro", "gemini-3-flash"])
def test_a_host_that_says_nothing_gets_the_evidence_profile_whatever_the_model(model) -> None:
    # Before: `gemini` in the name gave Google's rules (placeholders, no reasoning_details)
    # and a name without a vendor word gave a profile that kept nothing.
    assert profile_for("auto", "http://127.0.0.1:9/v1", model) is GENERIC
    assert GENERIC.first_call_placeholder is None


def test_a_vertex_shaped_signature_is_kept_and_returned_to_its_upstream() -> None:
    # Before: a Vertex-shaped upstream on 127.0.0.1 serving a model without a vendor word had
    # its signatures dropped, and the second tool round got a 400.
    h = Harness(GENERIC)
    exchange = h.stream(signed_stream("v1", "vertex", "SIG-V"))
    assert exchange.repairs["signatures_captured"] == 1
    messages, exchange = h.request(history(plain("v1")))
    assert messages[1]["tool_calls"][0]["extra_content"] == {
        "vertex": {"thought_signature": "SIG-V"}
    }
    assert exchange.repairs["signatures_injected"] == 1
    # Another upstream, or another tenant, gets nothing, and no placeholder is invented.
    for scope in ({"upstream": "other"}, {"tenant": "t2"}):
        messages, _ = h.request(history(plain("v1")), **scope)
        assert "extra_content" not in messages[1]["tool_calls"][0], scope


def test_reasoning_details_are_kept_for_an_upstream_whose_model_says_gemini() -> None:
    # Before: an OpenRouter-shaped upstream on 127.0.0.1 serving google/gemini-… got Gemini's
    # rules: its reasoning_details were not kept (400) and a Google placeholder was written
    # into a request bound for a non-Google gateway.
    details = [
        {"type": "reasoning.encrypted", "data": "ENC", "format": "google-gemini-v1", "index": 0}
    ]
    h = Harness(profile_for("auto", "http://127.0.0.1:9/api/v1", "google/gemini-2.5-flash"))
    h.stream(details_stream("d1", details))
    messages, exchange = h.request(history(plain("d1")))
    assert messages[1]["reasoning_details"] == details
    assert "extra_content" not in messages[1]["tool_calls"][0]  # no placeholder
    assert exchange.repairs["signatures_placeholders"] == 0


@pytest.mark.parametrize("provider", ["kimi", "glm", "qwen"])
def test_a_thinking_models_tool_turn_reasoning_comes_back_without_a_profile(provider) -> None:
    # Kimi, GLM and Qwen thinking models reject follow-ups whose tool turns lack their
    # reasoning_content, as DeepSeek does: the evidence rule covers them all.
    h = Harness(GENERIC)
    h.stream(deepseek_stream([f"{provider} thinks"], call("k1")))
    messages, exchange = h.request(history(plain("k1")))
    assert messages[1]["reasoning_content"] == f"{provider} thinks"
    assert exchange.repairs["reasoning_content_injected"] == 1


def test_a_foreign_field_stays_where_this_upstream_issued_it() -> None:
    # Before: a client that sent a Vertex-shaped upstream's own valid signature back (as the
    # OpenAI Node SDK's stream helper does) had it stripped as foreign metadata: 400.
    h = Harness(GENERIC)
    h.stream(signed_stream("v1", "vertex", "SIG-V"))
    sent = {**plain("v1"), "extra_content": {"vertex": {"thought_signature": "SIG-V"}}}
    foreign = {**plain("x9"), "extra_content": {"google": {"thought_signature": "OTHER"}}}
    messages, exchange = h.request(history(sent, foreign))
    calls = messages[1]["tool_calls"]
    assert calls[0]["extra_content"] == {"vertex": {"thought_signature": "SIG-V"}}
    assert "extra_content" not in calls[1]  # issued by nobody here: still foreign
    assert exchange.repairs["foreign_metadata_removed"] == 1


def test_known_non_google_hosts_still_strip_google_metadata() -> None:
    h = Harness(PROFILES["openai"])
    sent = {**plain("v1"), "extra_content": {"google": {"thought_signature": "S"}}}
    messages, exchange = h.request(history(sent))
    assert "extra_content" not in messages[1]["tool_calls"][0]
    assert exchange.repairs["foreign_metadata_removed"] == 1


# ── the receipt goes back as issued ──────────────────────────────────────────

ISSUED = [
    {"type": "reasoning.summary", "summary": "S", "format": "anthropic-claude-v1", "index": 0},
    {"type": "reasoning.encrypted", "data": "E", "format": "anthropic-claude-v1", "index": 1},
]
# What OpenAI's SDK stream accumulator makes of them: every string field concatenated, the two
# details merged into one.
MANGLED = [
    {
        "type": "reasoning.summaryreasoning.encrypted",
        "summary": "S",
        "data": "E",
        "format": "anthropic-claude-v1anthropic-claude-v1",
        "index": 0,
    }
]


@pytest.mark.parametrize("profile", ["generic", "openrouter"])
def test_a_mangled_receipt_goes_back_as_it_was_issued(profile: str) -> None:
    h = Harness(PROFILES[profile])
    h.stream(details_stream("m1", ISSUED))
    messages, exchange = h.request(history(plain("m1"), reasoning_details=MANGLED))
    assert messages[1]["reasoning_details"] == ISSUED
    assert exchange.repairs["reasoning_details_restored"] == 1


def test_an_unaltered_receipt_and_an_unseen_turn_are_left_alone() -> None:
    h = Harness(GENERIC)
    h.stream(details_stream("m1", ISSUED))
    messages, exchange = h.request(history(plain("m1"), reasoning_details=ISSUED))
    assert messages[1]["reasoning_details"] == ISSUED
    unseen, other = h.request(history(plain("never"), reasoning_details=MANGLED))
    assert unseen[1]["reasoning_details"] == MANGLED
    for counts in (exchange.repairs, other.repairs):
        assert counts["reasoning_details_restored"] == 0
        assert counts["reasoning_details_injected"] == 0


def test_a_placeholder_the_client_sent_gives_way_to_the_real_signature() -> None:
    h = Harness(PROFILES["gemini"])
    h.stream(signed_stream("g1", "google", "REAL"))
    sent: dict[str, Any] = {
        **plain("g1"),
        "extra_content": {"google": {"thought_signature": SKIP_SIGNATURE_VALIDATOR}},
    }
    messages, exchange = h.request(history(sent))
    assert messages[1]["tool_calls"][0]["extra_content"]["google"]["thought_signature"] == "REAL"
    assert exchange.repairs["signatures_restored"] == 1


# ── each receipt on its own (issue 26) ───────────────────────────────────────


def test_a_kept_reasoning_content_does_not_stand_in_for_the_dropped_details() -> None:
    # The AI SDK sends the reasoning it kept back as `reasoning_content` and never
    # `reasoning_details`. Before: a message carrying one receipt field counted as carrying
    # all, the details stayed out, and OpenRouter answered 400.
    h = Harness(GENERIC)
    h.stream(details_stream("k1", ISSUED))
    messages, exchange = h.request(history(plain("k1"), reasoning_content="what I kept"))
    assert messages[1]["reasoning_details"] == ISSUED
    assert messages[1]["reasoning_content"] == "what I kept"  # the client's, as it sent it
    assert exchange.repairs["reasoning_details_injected"] == 1
    assert exchange.repairs["reasoning_content_restored"] == 0


def test_each_issued_field_is_judged_on_its_own() -> None:
    # Both issued: the dropped one is put back, the altered one goes back as issued.
    h = Harness(GENERIC)
    h.stream([*deepseek_stream(["R"], call("k2"))[:-1], *details_stream("k2", ISSUED)[:1]])
    messages, exchange = h.request(history(plain("k2"), reasoning_content="edited"))
    assert messages[1]["reasoning_content"] == "R"
    assert messages[1]["reasoning_details"] == ISSUED
    assert exchange.repairs["reasoning_content_restored"] == 1
    assert exchange.repairs["reasoning_details_injected"] == 1


def test_a_signature_kept_in_the_other_namespace_is_not_doubled() -> None:
    # Google's and Vertex's places for one signature are one receipt: a client that kept it
    # in either kept it.
    h = Harness(GENERIC)
    h.stream(signed_stream("n1", "google", "SIG"))
    sent = {**plain("n1"), "extra_content": {"vertex": {"thought_signature": "SIG"}}}
    messages, exchange = h.request(history(sent))
    assert messages[1]["tool_calls"][0]["extra_content"] == {"vertex": {"thought_signature": "SIG"}}
    assert exchange.repairs["signatures_injected"] == 0


@pytest.mark.parametrize("profile", ["generic", "gemini"])
def test_a_tool_turns_message_signature_is_kept_and_returned(profile: str) -> None:
    # Google's endpoint has signed a tool turn on the message, not on its call. Before: no rule
    # took it, and the evidence profile stripped the client's own copy as foreign.
    h = Harness(PROFILES[profile])
    signed = {"google": {"thought": True, "thought_signature": "MSG-SIG"}}
    message = {"role": "assistant", "extra_content": signed, "tool_calls": [plain("g7")]}
    exchange = h.respond({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
    assert exchange.repairs["signatures_captured"] == 1
    dropped, exchange = h.request(history(plain("g7")))
    assert dropped[1]["extra_content"] == {"google": {"thought_signature": "MSG-SIG"}}
    assert exchange.repairs["signatures_injected"] == 1
    kept, exchange = h.request(history(plain("g7"), extra_content=signed))
    assert kept[1]["extra_content"] == signed
    assert exchange.repairs["foreign_metadata_removed"] == 0


# Grok behind OpenRouter: summary pieces at index 0, then one encrypted detail, also index 0.
# Gemini 3 behind Vercel's AI Gateway does the same with reasoning.text.
SAME_INDEX = [
    {"type": "reasoning.summary", "summary": "Plan: read it.", "format": "xai-v1", "index": 0},
    {"type": "reasoning.encrypted", "data": "ENC==", "format": "xai-v1", "index": 0},
]


def same_index_stream(call_id: str) -> list[dict]:
    pieces = [
        {"type": "reasoning.summary", "summary": "Plan: ", "format": "xai-v1", "index": 0},
        {"type": "reasoning.summary", "summary": "read it.", "format": "xai-v1", "index": 0},
        SAME_INDEX[1],
    ]
    return [
        *(delta_chunk({"role": "assistant", "reasoning_details": [p]}) for p in pieces),
        delta_chunk({"tool_calls": [call(call_id)]}),
        delta_chunk({}, "tool_calls"),
    ]


@pytest.mark.parametrize("profile", ["generic", "openrouter"])
def test_two_details_sharing_an_index_stay_two(profile: str) -> None:
    # Before: the encrypted detail was merged into the summary (one detail, `type` replaced),
    # and that one went upstream in place of the two issued.
    h = Harness(PROFILES[profile])
    h.stream(same_index_stream("s1"))
    messages, _ = h.request(history(plain("s1")))
    assert messages[1]["reasoning_details"] == SAME_INDEX
    # A client that kept the two as issued is left alone, not "restored" to one.
    messages, exchange = h.request(history(plain("s1"), reasoning_details=SAME_INDEX))
    assert messages[1]["reasoning_details"] == SAME_INDEX
    assert exchange.repairs["reasoning_details_restored"] == 0


def test_two_details_sharing_an_index_in_a_non_streamed_answer_stay_two() -> None:
    h = Harness(GENERIC)
    message = {
        "role": "assistant",
        "content": "",
        "reasoning_details": SAME_INDEX,
        "tool_calls": [plain("s2")],
    }
    h.respond({"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})
    messages, _ = h.request(history(plain("s2")))
    assert messages[1]["reasoning_details"] == SAME_INDEX


def test_a_piece_without_a_type_continues_the_detail_at_its_index() -> None:
    h = Harness(GENERIC)
    pieces = [
        {"type": "reasoning.text", "text": "a", "index": 0},
        {"text": "b", "index": 0},
        {"type": "reasoning.encrypted", "data": "E", "index": 0},
        {"data": "F", "index": 0},
    ]
    chunks = [delta_chunk({"reasoning_details": [p]}) for p in pieces]
    h.stream([*chunks, delta_chunk({"tool_calls": [call("s3")]}), delta_chunk({}, "tool_calls")])
    messages, _ = h.request(history(plain("s3")))
    assert messages[1]["reasoning_details"] == [
        {"type": "reasoning.text", "text": "ab", "index": 0},
        {"type": "reasoning.encrypted", "data": "EF", "index": 0},
    ]


# ── watching every stream costs no copy of its text ──────────────────────────

PIECES = st.lists(st.text(alphabet=" \t\nabé\u3000x", max_size=4), max_size=8)


@given(PIECES, st.text(alphabet=" qé", max_size=3))
def test_a_streamed_texts_digest_is_the_key_of_the_whole_text(pieces, prompt) -> None:
    # The evidence profile watches every stream for text-turn receipts: it hashes the text as
    # it streams instead of holding it, and must name the turn as the request side will.
    digest = TextDigest(prompt)
    for piece in pieces:
        digest.feed(piece)
    assert digest.key() == text_key("".join(pieces), prompt)
    assert digest.seen_text == bool("".join(pieces))


def test_endless_whitespace_is_hashed_not_held() -> None:
    pieces = ["Hello", *([" " * 1000] * 50), "world", *([" \n" * 700] * 10)]
    digest = TextDigest("q")
    for piece in pieces:
        digest.feed(piece)
        assert len(digest._pending) <= TextDigest.HELD + 2100  # one piece past the bound, at most
    assert digest.key() == text_key("".join(pieces), "q")


def test_a_receipt_past_the_limit_stops_growing_while_it_streams() -> None:
    # The evidence profile watches every stream: endless reasoning must not grow the proxy.
    from proxy.repair.receipts.capture import FieldBuilder

    rule = PROFILES["generic"].rules("tool_turn")[-1]  # reasoning_content, concatenated
    builder = FieldBuilder(rule, limit=1000)
    for _ in range(100):
        builder.feed({"reasoning_content": "x" * 100})
    assert builder.oversized and builder.value() is None
    h = Harness(GENERIC, max_value_bytes=1000)
    exchange = h.stream(deepseek_stream(["y" * 600, "z" * 600], call("big")))
    assert len(h.store) == 0
    assert exchange.repairs["receipt_too_large"] == 1
