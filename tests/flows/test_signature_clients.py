"""Thought signatures end to end with real clients, through the real proxy under uvicorn in front
of the Gemini fake (tests/support/gemini_upstream.py), which answers from a script (call ->
parallel calls -> text) and rejects, with Gemini's 400, a current-turn step whose first call
lacks the signature it issued (PROTOCOL.md §1.2).

The clients drop signatures the way real ones do: the Vercel AI SDK with a custom provider name
(as opencode configures it), and OpenAI's Python SDK with messages rebuilt the usual way (from
`model_dump()` minus `extra_content`, or by hand). Each flow must succeed through the proxy, and
the upstream's request log must show the issued signature on the first call of every step, and
none invented on the other calls of a parallel batch. The `*_without_proxy` tests run the same
clients straight at the fake and get the 400, which proves the flows can fail.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.clients.vercel import run_vercel_agent
from tests.support.gemini_upstream import (
    THREE_STEPS,
    TWO_STEPS,
    GeminiUpstream,
    current_turn_start,
    running_gemini_upstream,
    signature_of,
    tool_calls_of,
)
from tests.support.sdk_agent import (
    OPENAI_MODES,
    TOOL_RESULTS,
    VERCEL_SDKS,
    VERCEL_TOOLS,
    run_turn,
)
from tests.support.signature_flows import FINAL_TEXT, MODEL, SCRIPTS, gemini_behind_proxy


def steps_of(body: dict[str, Any]) -> list[tuple[int, list[dict[str, Any]]]]:
    """(message index, calls) of every assistant message with tool calls."""
    return [(i, calls) for i, m in enumerate(body["messages"]) if (calls := tool_calls_of(m))]


def assert_issued_signatures_returned(fake: GeminiUpstream) -> None:
    """In every request the fake got: the first call of every step carries exactly the signature
    the fake issued for that call to that credential; no other call carries one."""
    for n, request in enumerate(fake.requests):
        tenant = request.headers.get("authorization", "")
        for i, calls in steps_of(request.json):
            first, *rest = calls
            issued = fake.signature_for(first["id"], tenant)
            assert issued is not None, f"request {n}: the fake never issued call {first['id']}"
            assert signature_of(first) == issued, (
                f"request {n}, message {i}: first call {first['id']} carries "
                f"{signature_of(first)!r}, issued {issued!r}:\n{json.dumps(request.json)}"
            )
            for call in rest:
                assert "google" not in (call.get("extra_content") or {}), (
                    f"request {n}, message {i}: a signature was invented on call {call['id']}:\n"
                    f"{json.dumps(request.json)}"
                )


def assert_text_signature_returned(fake: GeminiUpstream, request_index: int, text: str) -> None:
    """The assistant message with `text` in that request carries the text-turn signature the
    fake issued with the first answer of that text."""
    issued = next(i.signature for i in fake.issued_log if i.call_id is None and i.text == text)
    body = fake.requests[request_index].json
    messages = [m for m in body["messages"] if m.get("role") == "assistant" and m.get("content")]
    matching = [m for m in messages if m["content"] == text]
    assert matching, f"no assistant message with {text!r} in request {request_index}: {body}"
    for message in matching:
        assert signature_of(message) == issued, json.dumps(body)


def step_counts(fake: GeminiUpstream) -> list[int]:
    """How many assistant tool-call messages each request's current turn had."""
    counts = []
    for request in fake.requests:
        messages = request.json["messages"]
        start = current_turn_start(messages)
        counts.append(sum(1 for m in messages[start:] if tool_calls_of(m)))
    return counts


def _vercel(sdk: str, base_url: str, **kwargs: Any) -> dict[str, Any]:
    return run_vercel_agent(
        sdk, base_url, MODEL, VERCEL_TOOLS, execute=TOOL_RESULTS, max_steps=5, **kwargs
    )


def _vercel_step_summary(result: dict[str, Any]) -> list[tuple[list[str], str | None]]:
    return [([c["toolName"] for c in s["toolCalls"]], s["finishReason"]) for s in result["steps"]]


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("sdk", VERCEL_SDKS)
def test_vercel_three_step_flow_through_proxy(sdk: str) -> None:
    with gemini_behind_proxy(THREE_STEPS) as (fake, _, proxy):
        result = _vercel(sdk, proxy, prompt="read a.txt and b.txt, list the directory")
        assert result["errors"] == [], result["apiErrors"]
        assert _vercel_step_summary(result) == [
            (["read_file"], "tool-calls"),
            (["read_file", "list_dir"], "tool-calls"),
            ([], "stop"),
        ]
        assert result["text"] == FINAL_TEXT["three-step"]
        assert fake.rejections == 0
        assert step_counts(fake) == [0, 1, 2]
        assert_issued_signatures_returned(fake)


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("sdk", VERCEL_SDKS)
def test_vercel_two_turn_flow_through_proxy(sdk: str) -> None:
    with gemini_behind_proxy(TWO_STEPS) as (fake, _, proxy):
        first = _vercel(sdk, proxy, prompt="read a.txt")
        assert first["errors"] == [], first["apiErrors"]
        assert first["text"] == FINAL_TEXT["two-turn"]
        history = [
            {"role": "user", "content": "read a.txt"},
            *first["responseMessages"],
            {"role": "user", "content": "and once more"},
        ]
        second = _vercel(sdk, proxy, messages=history)
        assert second["errors"] == [], second["apiErrors"]
        assert _vercel_step_summary(second) == [(["read_file"], "tool-calls"), ([], "stop")]
        assert fake.rejections == 0
        assert step_counts(fake) == [0, 1, 0, 1]
        assert_issued_signatures_returned(fake)
        # The first turn's text answer gets its text-turn signature back in the second turn.
        for n in (2, 3):
            assert_text_signature_returned(fake, n, FINAL_TEXT["two-turn"])


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("sdk", ["v2", "v3"])
def test_vercel_parallel_batch_in_one_chunk_through_proxy(sdk: str) -> None:
    with gemini_behind_proxy(THREE_STEPS, parallel_in_one_chunk=True) as (fake, _, proxy):
        result = _vercel(sdk, proxy)
        assert result["errors"] == [], result["apiErrors"]
        assert [len(s["toolCalls"]) for s in result["steps"]] == [1, 2, 0]
        assert fake.rejections == 0
        assert step_counts(fake) == [0, 1, 2]
        assert_issued_signatures_returned(fake)


@pytest.mark.usefixtures("node_clients")
def test_vercel_v2_without_proxy_gets_the_400() -> None:
    # @ai-sdk/openai-compatible 2.0.41 keeps the signature under providerMetadata.custom and
    # serializes only providerOptions.google (PROTOCOL.md §2.1): the second step is rejected.
    with running_gemini_upstream(THREE_STEPS) as (fake, root):
        result = _vercel("v2", f"{root}/v1beta/openai")
        (step,) = result["steps"]
        (call,) = step["toolCalls"]
        signature = fake.issued[call["toolCallId"]]
        assert call["providerMetadata"] == {"custom": {"thoughtSignature": signature}}
        assert [(e["status"], e["name"]) for e in result["apiErrors"]] == [(400, "AI_APICallError")]
        assert "missing a thought_signature" in result["apiErrors"][0]["body"]
        assert fake.rejections == 1
        assert signature_of(tool_calls_of(fake.requests[1].json["messages"][1])[0]) is None


@pytest.mark.usefixtures("node_clients")
def test_vercel_v3_sends_the_signature_back_itself() -> None:
    # Unlike 2.0.41, 3.0.92 serializes providerOptions[<provider name>].thoughtSignature (and
    # .google's): the tool-call signatures survive a custom provider name without the proxy.
    with running_gemini_upstream(THREE_STEPS) as (fake, root):
        result = _vercel("v3", f"{root}/v1beta/openai")
        assert result["errors"] == [], result["apiErrors"]
        assert fake.rejections == 0
        assert_issued_signatures_returned(fake)


# ── OpenAI Python SDK, rebuilding messages the usual way ─────────────────────


def _client(base_url: str, key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)


def _forget_extra_content(dumped: dict[str, Any]) -> None:
    """Non-streamed: model_dump minus what the app does not know (extra_content)."""
    dumped.pop("extra_content", None)
    for call in dumped.get("tool_calls", []):
        call.pop("extra_content", None)


def _openai_flow(base_url: str, flow: str, mode: str, key: str = "sk-test") -> list[str]:
    client = _client(base_url, key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read a.txt"}]
    texts = [run_turn(client, MODEL, messages, mode, _forget_extra_content)]
    if flow == "two-turn":
        messages.append({"role": "user", "content": "and once more"})
        texts.append(run_turn(client, MODEL, messages, mode, _forget_extra_content))
    return texts


@pytest.mark.parametrize("mode", OPENAI_MODES)
@pytest.mark.parametrize("flow", ["three-step", "two-turn"])
def test_openai_sdk_flow_through_proxy(flow: str, mode: str) -> None:
    with gemini_behind_proxy(SCRIPTS[flow]) as (fake, _, proxy):
        texts = _openai_flow(proxy, flow, mode)
        assert fake.rejections == 0
        assert_issued_signatures_returned(fake)
        if flow == "three-step":
            assert texts == [FINAL_TEXT[flow]]
            assert step_counts(fake) == [0, 1, 2]
        else:
            assert texts == [FINAL_TEXT[flow]] * 2
            assert step_counts(fake) == [0, 1, 0, 1]
            for n in (2, 3):
                assert_text_signature_returned(fake, n, FINAL_TEXT[flow])


@pytest.mark.parametrize("mode", ["stream", "create-stream"])
def test_openai_sdk_parallel_batch_in_one_chunk_through_proxy(mode: str) -> None:
    with gemini_behind_proxy(THREE_STEPS, parallel_in_one_chunk=True) as (fake, _, proxy):
        assert _openai_flow(proxy, "three-step", mode) == [FINAL_TEXT["three-step"]]
        assert fake.rejections == 0
        assert step_counts(fake) == [0, 1, 2]
        assert_issued_signatures_returned(fake)


@pytest.mark.parametrize("mode", ["create-stream", "create"])
def test_openai_sdk_flow_without_proxy_gets_the_400(mode: str) -> None:
    with running_gemini_upstream(THREE_STEPS) as (fake, root):
        with pytest.raises(openai.BadRequestError) as caught:
            _openai_flow(f"{root}/v1beta/openai", "three-step", mode)
        assert caught.value.status_code == 400
        assert "missing a thought_signature" in caught.value.response.text
        assert "default_api:read_file" in caught.value.response.text
        assert fake.rejections == 1
        assert len(fake.requests) == 2
