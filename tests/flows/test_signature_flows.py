"""Thought signatures end to end: real clients, the real proxy, a Gemini that enforces the rule.

Every test here runs the proxy under a real uvicorn in front of `tests/support/gemini_upstream.py`,
a fake Gemini OpenAI-compatible endpoint on loopback that answers from a script (call -> parallel
calls -> text) and rejects, with Gemini's 400, a current-turn step whose first call lacks the
signature it issued (PROTOCOL.md §1.2). The base URL's host is 127.0.0.1, so the proxy must
recognise Google's rules from the model name (`gemini-3-flash-preview`).

The clients drop signatures the way real ones do: the Vercel AI SDK with a custom provider name
(as opencode configures it), and OpenAI's Python SDK with messages rebuilt the usual way (from
`model_dump()` minus `extra_content`, or by hand). Each flow must succeed through the proxy, and
the upstream's request log must show the issued signature on the first call of every step, and
none invented on the other calls of a parallel batch. The `*_without_proxy` tests run the same
clients straight at the fake and get the 400, which proves the flows can fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest

from tests.clients.vercel import run_vercel_agent
from tests.support.fake_upstream import running_fake_upstream
from tests.support.gemini_upstream import (
    CORRUPTED_SIGNATURE_MESSAGE,
    DUMMY_SIGNATURE,
    THREE_STEPS,
    TOOL_SCHEMAS,
    TWO_STEPS,
    GeminiUpstream,
    Step,
    TextStep,
    current_turn_start,
    missing_signature_message,
    running_gemini_upstream,
    signature_of,
    tool_calls_of,
)
from tests.support.proxies import running_proxy

MODEL = "gemini-3-flash-preview"
VERCEL_SDKS = ("v1", "v2", "v3")
VERCEL_TOOLS = [
    {"name": name, "description": f"the {name} tool", "parameters": schema}
    for name, schema in TOOL_SCHEMAS.items()
]
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}}
    for t in VERCEL_TOOLS
]
# What the tools "return", by name.
TOOL_RESULTS: dict[str, Any] = {"read_file": {"content": "hello"}, "list_dir": ["a.txt", "b.txt"]}

FINAL_TEXT = {
    "three-step": next(s.text for s in THREE_STEPS if isinstance(s, TextStep)),
    "two-turn": next(s.text for s in TWO_STEPS if isinstance(s, TextStep)),
}
SCRIPTS: dict[str, list[Step]] = {"three-step": THREE_STEPS, "two-turn": TWO_STEPS}


# The fake stands in for Google's endpoint, whose host picks the gemini profile; on 127.0.0.1
# the profile is configured, as a user's tunnel to Google would be.
GOOGLE = {"upstream.profile": "gemini"}


@contextmanager
def gemini_behind_proxy(
    script: list[Step] | None = None, proxy_config: dict[str, Any] | None = None, **knobs: Any
) -> Iterator[tuple[GeminiUpstream, str, str]]:
    """(fake, the fake's base URL, the proxy's base URL), both `…/v1`-style OpenAI base URLs."""
    with (
        running_gemini_upstream(script, **knobs) as (fake, root),
        running_proxy(f"{root}/v1beta/openai", **{**GOOGLE, **(proxy_config or {})}) as proxy,
    ):
        yield fake, f"{root}/v1beta/openai", f"{proxy}/v1"


# ── what the upstream received ───────────────────────────────────────────────


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


# ── the fake itself, without the proxy ───────────────────────────────────────


def _post(base_url: str, body: dict[str, Any], key: str = "k") -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=30)


def _stripped(call: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in call.items() if k != "extra_content"}


def test_fake_enforces_the_signature_rule_without_proxy() -> None:
    with running_gemini_upstream(THREE_STEPS) as (fake, root):
        base = f"{root}/v1beta/openai"
        user = {"role": "user", "content": "read a.txt"}
        first = _post(base, {"model": MODEL, "messages": [user]})
        assert first.status_code == 200, first.text
        message = first.json()["choices"][0]["message"]
        assert first.json()["choices"][0]["finish_reason"] == "tool_calls"
        (call,) = message["tool_calls"]
        assert signature_of(call) == fake.issued[call["id"]]
        result = {"role": "tool", "tool_call_id": call["id"], "content": "hello"}

        # Dropped signature: Gemini's 400, naming the call and its position.
        unsigned = {"role": "assistant", "tool_calls": [_stripped(call)]}
        response = _post(base, {"model": MODEL, "messages": [user, unsigned, result]})
        assert response.status_code == 400
        assert response.json() == [
            {
                "error": {
                    "code": 400,
                    "message": missing_signature_message("read_file", 2),
                    "status": "INVALID_ARGUMENT",
                }
            }
        ]
        assert fake.rejections == 1

        # Another call's signature, or one never issued: corrupted.
        for wrong in ("bm90IGlzc3VlZA==", "x" + fake.issued[call["id"]]):
            forged = {
                "role": "assistant",
                "tool_calls": [{**call, "extra_content": {"google": {"thought_signature": wrong}}}],
            }
            response = _post(base, {"model": MODEL, "messages": [user, forged, result]})
            assert response.status_code == 400
            assert response.json()[0]["error"]["message"] == CORRUPTED_SIGNATURE_MESSAGE

        # Another credential's signature: corrupted too (signatures are bound to the client).
        response = _post(base, {"model": MODEL, "messages": [user, message, result]}, key="other")
        assert response.status_code == 400
        assert response.json()[0]["error"]["message"] == CORRUPTED_SIGNATURE_MESSAGE

        # The dummy is accepted; so is the signature sent back where it was received.
        dummy = {
            "role": "assistant",
            "tool_calls": [
                {**call, "extra_content": {"google": {"thought_signature": DUMMY_SIGNATURE}}}
            ],
        }
        assert _post(base, {"model": MODEL, "messages": [user, dummy, result]}).status_code == 200
        ok = _post(base, {"model": MODEL, "messages": [user, message, result]})
        assert ok.status_code == 200, ok.text
        parallel = ok.json()["choices"][0]["message"]["tool_calls"]
        assert [c["function"]["name"] for c in parallel] == ["read_file", "list_dir"]
        assert signature_of(parallel[0]) == fake.issued[parallel[0]["id"]]
        assert "extra_content" not in parallel[1]

        # An older turn is not validated: a new user message makes the unsigned step history.
        later = [user, unsigned, result, {"role": "assistant", "content": "done"}, user]
        assert _post(base, {"model": MODEL, "messages": later}).status_code == 200
        assert fake.rejections == 4


def test_fake_streams_like_gemini() -> None:
    with running_gemini_upstream(THREE_STEPS) as (fake, root):
        base = f"{root}/v1beta/openai"
        user = {"role": "user", "content": "go"}
        # A forged history that reaches step 1 (the dummy passes) gets the parallel batch.
        dummy = {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "elsewhere",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                    "extra_content": {"google": {"thought_signature": DUMMY_SIGNATURE}},
                }
            ],
        }
        result = {"role": "tool", "tool_call_id": "elsewhere", "content": "x"}
        body = {"model": MODEL, "stream": True, "messages": [user, dummy, result]}
        response = _post(base, body)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [e for e in response.text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
        calls = [c for ch in chunks for c in ch["choices"][0]["delta"].get("tool_calls", [])]
        assert len(calls) == 2
        assert all("index" not in c for c in calls)
        assert signature_of(calls[0]) == fake.issued[calls[0]["id"]]
        assert "extra_content" not in calls[1]
        assert all(ch["choices"][0]["delta"].get("role") == "assistant" for ch in chunks)
        assert [ch["choices"][0].get("finish_reason") for ch in chunks] == [None, None, "stop"]
        assert "finish_reason" not in chunks[0]["choices"][0]
        assert "usage" in chunks[1]

        # Text: signed on a last delta with content null.
        body["messages"] += [
            {"role": "assistant", "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c["id"], "content": "x"} for c in calls),
        ]
        response = _post(base, body)
        chunks = [json.loads(e[6:]) for e in response.text.split("\n\n") if e and e[6:] != "[DONE]"]
        text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks)
        assert text == FINAL_TEXT["three-step"]
        last = chunks[-1]["choices"][0]
        assert last["delta"]["content"] is None
        assert signature_of(last["delta"]) == fake.text_signatures[text]
        assert last["finish_reason"] == "stop"


def test_fake_fixed_ids() -> None:
    def ids(step: int, position: int) -> str:
        return f"fixed-{step}-{position}"

    with running_gemini_upstream(THREE_STEPS, fixed_ids=ids) as (fake, root):
        base = f"{root}/v1beta/openai"
        body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}]}
        one = _post(base, body, key="k1").json()["choices"][0]["message"]["tool_calls"][0]
        two = _post(base, body, key="k2").json()["choices"][0]["message"]["tool_calls"][0]
        assert one["id"] == two["id"] == "fixed-0-0"
        assert signature_of(one) != signature_of(two)
        assert fake.signature_for("fixed-0-0", "Bearer k1") == signature_of(one)
        assert fake.signature_for("fixed-0-0", "Bearer k2") == signature_of(two)


# ── Vercel AI SDK (custom provider name), through the proxy ──────────────────


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

OPENAI_MODES = ("stream", "create-stream", "create")


def _client(base_url: str, key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)


def _ask(client: openai.OpenAI, messages: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """One request; returns the assistant message as an app would put it back in the history."""
    kwargs: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": OPENAI_TOOLS}
    if mode == "stream":
        # The SDK's helper; the message is rebuilt by hand from the parsed tool calls.
        with client.chat.completions.stream(**kwargs) as stream:
            message = stream.get_final_completion().choices[0].message
        rebuilt: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            rebuilt["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in message.tool_calls
            ]
        return rebuilt
    if mode == "create-stream":
        # The hand-written accumulation apps use: a dict keyed on index (on id when a delta has
        # none, so that the same loop can run straight against Gemini), strings concatenated.
        content = ""
        calls: dict[Any, dict[str, Any]] = {}
        for chunk in client.chat.completions.create(stream=True, **kwargs):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for tc in delta.tool_calls or []:
                key = tc.index if tc.index is not None else tc.id
                call = calls.setdefault(
                    key, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] += tc.id or ""
                if tc.function:
                    call["function"]["name"] += tc.function.name or ""
                    call["function"]["arguments"] += tc.function.arguments or ""
        rebuilt = {"role": "assistant", "content": content or None}
        if calls:
            rebuilt["tool_calls"] = list(calls.values())
        return rebuilt
    # Non-streamed: model_dump minus what the app does not know (extra_content).
    completion = client.chat.completions.create(**kwargs)
    dumped = completion.choices[0].message.model_dump(exclude_none=True)
    dumped.pop("extra_content", None)
    for call in dumped.get("tool_calls", []):
        call.pop("extra_content", None)
    return dumped


def _run_turn(
    client: openai.OpenAI, messages: list[dict[str, Any]], mode: str, max_steps: int = 5
) -> str:
    """The agent loop: ask, run the tools, ask again, until a text answer. Appends to
    `messages`; returns the final text."""
    for _ in range(max_steps):
        assistant = _ask(client, messages, mode)
        messages.append(assistant)
        if not assistant.get("tool_calls"):
            return str(assistant.get("content"))
        for call in assistant["tool_calls"]:
            result = TOOL_RESULTS[call["function"]["name"]]
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
    raise AssertionError(f"no text answer after {max_steps} steps")


def _openai_flow(base_url: str, flow: str, mode: str, key: str = "sk-test") -> list[str]:
    client = _client(base_url, key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read a.txt"}]
    texts = [_run_turn(client, messages, mode)]
    if flow == "two-turn":
        messages.append({"role": "user", "content": "and once more"})
        texts.append(_run_turn(client, messages, mode))
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


# ── tenant isolation ─────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "config",
    [{}, {"signatures.tenant_header": "x-tenant"}],
    ids=["credential", "tenant-header"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_tenants_never_see_each_others_signatures(config: dict[str, Any], stream: bool) -> None:
    """Two clients get the same call id from the upstream; each follow-up must carry its own
    client's signature. The requests interleave, so a store keyed by call id alone would hand
    the second client's signature to the first."""

    def ids(step: int, position: int) -> str:
        return f"shared-{step}-{position}"

    by_header = bool(config)
    with gemini_behind_proxy(THREE_STEPS, config, fixed_ids=ids) as (fake, _, proxy):
        clients, keys = {}, {}
        for name in ("one", "two"):
            # Same credential when a tenant header names the tenant, different keys otherwise.
            key = keys[name] = "sk-shared" if by_header else f"sk-{name}"
            headers = {"x-tenant": name} if by_header else {}
            clients[name] = openai.OpenAI(
                base_url=proxy, api_key=key, max_retries=0, timeout=30, default_headers=headers
            )
        histories = {name: [{"role": "user", "content": "read a.txt"}] for name in clients}
        issued: dict[str, str] = {}
        for name, client in clients.items():
            kwargs = {"model": MODEL, "messages": histories[name], "tools": OPENAI_TOOLS}
            if stream:
                with client.chat.completions.stream(**kwargs) as s:
                    message = s.get_final_completion().choices[0].message
            else:
                message = client.chat.completions.create(**kwargs).choices[0].message
            (call,) = message.tool_calls
            assert call.id == "shared-0-0"
            latest = fake.issued_log[-1]
            assert (latest.call_id, latest.tenant) == ("shared-0-0", f"Bearer {keys[name]}")
            issued[name] = latest.signature
            histories[name] += [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call.id, "content": "hello"},
            ]
        assert issued["one"] != issued["two"]
        follow_ups = {}
        for name, client in clients.items():
            client.chat.completions.create(
                model=MODEL, messages=histories[name], tools=OPENAI_TOOLS
            )
            follow_ups[name] = fake.requests[-1].json
        for name, body in follow_ups.items():
            (_, calls), *_ = steps_of(body)
            assert signature_of(calls[0]) == issued[name], (name, json.dumps(body))
        assert fake.rejections == 0


# ── no Google metadata to other upstreams ────────────────────────────────────

SIGNED_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Paris and Tokyo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "k2j9xq1m",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                "extra_content": {"google": {"thought_signature": "CiQBcsjafGxAVt0yQ3lxo5ZR"}},
            },
            {
                "id": "p8f3zt6c",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Tokyo"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "k2j9xq1m", "content": "18C"},
    {"role": "tool", "tool_call_id": "p8f3zt6c", "content": "22C"},
    {
        "role": "assistant",
        "content": "Paris 18C, Tokyo 22C.",
        "extra_content": {"google": {"thought_signature": "EjQKMgG+Pvb7s6anNtqT"}},
    },
    {"role": "user", "content": "and in Rome?"},
]


def _google_metadata(value: Any, path: str = "") -> list[str]:
    """Paths of every `extra_content.google` (or `extra_content.vertex`) in `value`."""
    found = []
    if isinstance(value, dict):
        extra = value.get("extra_content")
        if isinstance(extra, dict):
            found += [f"{path}.extra_content.{k}" for k in ("google", "vertex") if k in extra]
        for key, item in value.items():
            found += _google_metadata(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _google_metadata(item, f"{path}[{i}]")
    return found


@pytest.mark.parametrize(
    ("profile", "model", "stream"),
    [
        ("openai", "openai_indexed_parallel", True),
        ("openai", "openai_indexed_fragmented", False),
        # No profile given: a loopback host and a model without "gemini" is not Google.
        ("auto", "openai_indexed_parallel", True),
    ],
)
def test_no_google_metadata_reaches_other_upstreams(profile: str, model: str, stream: bool) -> None:
    assert _google_metadata(SIGNED_HISTORY)  # the history does carry some
    with (
        running_fake_upstream() as (fake, root),
        running_proxy(f"{root}/v1", **{"upstream.profile": profile}) as proxy,
    ):
        body = {"model": model, "stream": stream, "messages": SIGNED_HISTORY}
        response = _post(f"{proxy}/v1", body)
        assert response.status_code == 200, response.text
        (received,) = [r.json for r in fake.requests if r.path.endswith("/chat/completions")]
        assert _google_metadata(received) == [], json.dumps(received)
        # Everything else arrives as sent.
        assert [m["role"] for m in received["messages"]] == [m["role"] for m in SIGNED_HISTORY]
        calls = received["messages"][1]["tool_calls"]
        assert [(c["id"], c["function"]) for c in calls] == [
            (c["id"], c["function"]) for c in SIGNED_HISTORY[1]["tool_calls"]
        ]
        assert received["messages"][4]["content"] == "Paris 18C, Tokyo 22C."


# ── history the proxy never saw ──────────────────────────────────────────────


def _call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


FOREIGN_HISTORY: list[dict[str, Any]] = [
    # An older turn, unsigned: Gemini does not validate it, the proxy must leave it alone.
    {"role": "user", "content": "what is in old.txt?"},
    {"role": "assistant", "content": None, "tool_calls": [_call("old-1", "read_file")]},
    {"role": "tool", "tool_call_id": "old-1", "content": "old"},
    {"role": "assistant", "content": "It says old."},
    # The current turn: two steps from elsewhere (another model, another proxy, a restart).
    {"role": "user", "content": "now read a.txt and list the directory"},
    {"role": "assistant", "content": None, "tool_calls": [_call("foreign-1", "read_file")]},
    {"role": "tool", "tool_call_id": "foreign-1", "content": "hello"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("foreign-2", "read_file"), _call("foreign-3", "list_dir")],
    },
    {"role": "tool", "tool_call_id": "foreign-2", "content": "hello"},
    {"role": "tool", "tool_call_id": "foreign-3", "content": "[]"},
]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_unseen_current_turn_step_gets_the_placeholder(stream: bool) -> None:
    with gemini_behind_proxy(THREE_STEPS) as (fake, _, proxy):
        body = {"model": MODEL, "stream": stream, "messages": FOREIGN_HISTORY}
        response = _post(proxy, body)
        assert response.status_code == 200, response.text
        assert fake.rejections == 0
        received = fake.requests[-1].json["messages"]
        assert len(received) == len(FOREIGN_HISTORY)
        # The older turn arrives exactly as sent.
        assert received[:5] == FOREIGN_HISTORY[:5]
        # Each current-turn step: the dummy on its first call, nothing on the others.
        assert signature_of(received[5]["tool_calls"][0]) == DUMMY_SIGNATURE
        first, second = received[7]["tool_calls"]
        assert signature_of(first) == DUMMY_SIGNATURE
        assert "extra_content" not in second
        for i in (5, 7):
            for j, call in enumerate(received[i]["tool_calls"]):
                assert _stripped(call) == FOREIGN_HISTORY[i]["tool_calls"][j]
        assert received[6:7] + received[8:] == FOREIGN_HISTORY[6:7] + FOREIGN_HISTORY[8:]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_on_missing_leave_relays_geminis_400(stream: bool) -> None:
    config = {"signatures.on_missing": "leave"}
    with gemini_behind_proxy(THREE_STEPS, config) as (fake, _, proxy):
        body = {"model": MODEL, "stream": stream, "messages": FOREIGN_HISTORY}
        response = _post(proxy, body)
        assert fake.rejections == 1
        status, sent = fake.responses[-1]
        assert (response.status_code, response.content) == (status, sent) == (400, sent)
        assert response.headers["content-type"].startswith("application/json")
        message = response.json()[0]["error"]["message"]
        assert message == missing_signature_message("read_file", 6)
        received = fake.requests[-1].json["messages"]
        assert _google_metadata(received) == []
