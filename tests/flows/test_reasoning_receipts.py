"""Reasoning receipts end to end: real clients, the real proxy, DeepSeek and OpenRouter fakes.

The fakes (`tests/support/reasoning_upstreams.py`) enforce the rules of PROTOCOL.md §1.5 and §1.7:
DeepSeek rejects a tool-calling assistant message without the exact `reasoning_content` it
issued for it, OpenRouter an assistant message it answered without the exact
`reasoning_details` array. Both hand out fresh random reasoning on every answer, so only a
proxy that captured it can put it back.

The flow is the issue's: three steps (call, parallel calls, text), a new user question, then
another tool step and a text answer: five requests. The clients drop the fields the way real
ones do: OpenAI's Python SDK with messages rebuilt without them (three ways), and the Vercel AI
SDK with a custom provider name, which never sends `reasoning_details` and, with a history
stored without its reasoning parts, no `reasoning_content` for earlier turns either. Every
flow must succeed through the proxy, and the upstream's request log must show each receipt
back, verbatim, on the message it came with. The `*_without_proxy` tests run the same clients
straight at the fake and get the 400, which proves the flows can fail.

Also: reasoning reaches the client unchanged (streamed pieces and non-streamed fields) with
the tool-call rules unaffected; a client's own value is never replaced; a DeepSeek miss is left
alone, relayed and counted; receipts stay with their tenant and their upstream (one proxy
routing to DeepSeek, OpenRouter and a plain upstream); the memory store stays within its
budget with large reasoning; and with `signatures.store = "redis://…"` receipts of streams
survive a client that closes at `[DONE]`, as OpenAI's SDK does.

The DeepSeek fake's base URL is on 127.0.0.1, so the proxy takes the `deepseek` profile from
the model name; for OpenRouter the host says nothing, so `upstream.profile = "openrouter"`.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import redis
from starlette.applications import Starlette

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.clients.vercel import VercelDriverError, ensure_node_modules, run_vercel_agent
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.reasoning_upstreams import (
    DEEPSEEK_MESSAGE,
    OPENROUTER_MISSING_MESSAGE,
    TOOL_SCHEMAS,
    TWO_TURNS,
    Issued,
    Rejection,
    TextStep,
    running_deepseek_upstream,
    running_openrouter_upstream,
    step_of,
    tool_calls_of,
)
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.servers import serve_in_thread

VERCEL_SDKS = ("v1", "v2", "v3")
OPENAI_MODES = ("stream", "create-stream", "create")
VERCEL_TOOLS = [
    {"name": name, "description": f"the {name} tool", "parameters": schema}
    for name, schema in TOOL_SCHEMAS.items()
]
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}}
    for t in VERCEL_TOOLS
]
TOOL_RESULTS: dict[str, Any] = {"read_file": {"content": "hello"}, "list_dir": ["a.txt", "b.txt"]}
QUESTIONS = ("read a.txt and b.txt, list the directory", "now read c.txt")
FINAL_TEXTS = [next(s.text for s in turn if isinstance(s, TextStep)) for turn in TWO_TURNS]
# Five requests: turn 0 steps 0, 1, 2; turn 1 steps 0, 1.
STEP_COUNTS = [0, 1, 2, 0, 1]
# What an app that "does not know" these fields leaves out when it stores a message.
REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_details")


@dataclass(frozen=True)
class Provider:
    name: str
    model: str
    field: str  # the receipt: "reasoning_content" or "reasoning_details"
    api: str  # the fake's base URL path
    running: Callable[..., AbstractContextManager[Any]]
    proxy_config: dict[str, Any]
    missing_error: str


DEEPSEEK = Provider(
    "deepseek",
    "deepseek-v4-flash",
    "reasoning_content",
    "/v1",
    running_deepseek_upstream,
    {"upstream.profile": "deepseek"},  # the host api.deepseek.com would pick it
    DEEPSEEK_MESSAGE,
)
OPENROUTER = Provider(
    "openrouter",
    "google/gemini-3-pro-preview",
    "reasoning_details",
    "/api/v1",
    running_openrouter_upstream,
    {"upstream.profile": "openrouter"},
    OPENROUTER_MISSING_MESSAGE,
)
PROVIDERS = {p.name: p for p in (DEEPSEEK, OPENROUTER)}


@pytest.fixture(scope="module")
def node_clients() -> None:
    ensure_node_modules()


@contextmanager
def behind_proxy(
    provider: Provider, proxy_config: dict[str, Any] | None = None, **knobs: Any
) -> Iterator[tuple[Any, str, str]]:
    """(fake, the fake's base URL, the proxy's base URL)."""
    with provider.running(**knobs) as (fake, root):
        base = f"{root}{provider.api}"
        with running_proxy(base, **{**provider.proxy_config, **(proxy_config or {})}) as proxy:
            yield fake, base, f"{proxy}/v1"


@contextmanager
def proxy_app(upstream_base_url: str, **values: Any) -> Iterator[tuple[Starlette, str]]:
    """Like conftest's running_proxy, but also yields the app (to look at its store)."""
    settings = Settings().with_values(
        {"upstream.base_url": upstream_base_url, "repairs.strict": True, **values}
    )
    app = create_app(settings)
    with serve_in_thread(app) as url:
        yield app, url


# ── what the upstream received ───────────────────────────────────────────────


def step_counts(fake: Any) -> list[int]:
    """How many assistant tool-call messages each request's current turn had."""
    return [step_of(r.json["messages"]) for r in fake.requests]


def rejection_reasons(fake: Any) -> list[str]:
    return [r.reason for r in fake.rejections]


def assert_receipts_returned(fake: Any, provider: Provider, *, client_sends: bool = False) -> int:
    """In every request the fake got, each assistant message the fake answered carries exactly
    the receipt it issued with that answer to that credential (DeepSeek: tool-calling messages
    only). No other message carries one, unless `client_sends` (a client that sends reasoning
    itself). Returns how many receipts came back."""
    returned = 0
    for n, request in enumerate(fake.requests):
        tenant = request.headers.get("authorization", "")
        for i, message in enumerate(request.json["messages"]):
            if message.get("role") != "assistant":
                continue
            issued = fake.issued_for(message, tenant)
            needs = bool(issued) and (provider is OPENROUTER or bool(tool_calls_of(message)))
            where = f"request {n}, message {i}:\n{json.dumps(request.json)[:3000]}"
            if needs:
                assert provider.field in message, f"no {provider.field} on {where}"
                sent = message[provider.field]
                assert any(sent == item.receipt for item in issued), f"wrong receipt on {where}"
                returned += 1
            elif not client_sends:
                assert provider.field not in message, f"invented {provider.field} on {where}"
    return returned


def assert_last_request_complete(fake: Any, provider: Provider) -> None:
    """The flow's last request carries a receipt on every tool-calling message (turn 0 steps 0
    and 1, turn 1 step 0), and for OpenRouter on turn 0's text answer too."""
    messages = fake.requests[-1].json["messages"]
    if provider is DEEPSEEK:
        messages = [m for m in messages if tool_calls_of(m)]
    carrying = sum(provider.field in m for m in messages)
    assert carrying == (4 if provider is OPENROUTER else 3), json.dumps(messages)[:3000]


def _post(base_url: str, body: dict[str, Any], key: str = "k") -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=60)


def _metric(proxy_root: str, kind: str) -> float:
    text = httpx.get(f"{proxy_root}/metrics", timeout=10).text
    match = re.search(rf'^streamfix_repairs_total\{{kind="{kind}"\}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def _metric_reaches(proxy_root: str, kind: str, value: float) -> float:
    """The exchange is counted when its response closed: poll briefly."""
    deadline = time.monotonic() + 5
    while (seen := _metric(proxy_root, kind)) < value and time.monotonic() < deadline:
        time.sleep(0.02)
    return seen


# ── the fakes themselves, without the proxy ──────────────────────────────────


def _stripped(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in REASONING_FIELDS}


def _results(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": c["id"], "content": "hello"} for c in message["tool_calls"]
    ]


def test_deepseek_fake_enforces_its_rule() -> None:
    with running_deepseek_upstream() as (fake, root):
        base = f"{root}/v1"
        user = {"role": "user", "content": "read a.txt"}
        first = _post(base, {"model": DEEPSEEK.model, "messages": [user]})
        assert first.status_code == 200, first.text
        (choice,) = first.json()["choices"]
        assert choice["finish_reason"] == "tool_calls"
        message = choice["message"]
        (call,) = message["tool_calls"]
        assert re.fullmatch(r"call_00_[A-Za-z0-9]{24}", call["id"])
        assert message["reasoning_content"] == fake.receipt_for([call["id"]]) != ""

        def ask(history: list[dict[str, Any]], key: str = "k") -> httpx.Response:
            return _post(base, {"model": DEEPSEEK.model, "messages": history}, key)

        # Dropped: DeepSeek's 400, word for word.
        response = ask([user, _stripped(message), *_results(message)])
        assert response.status_code == 400
        assert response.json() == {
            "error": {
                "message": "The reasoning_content in the thinking mode must be passed back to "
                "the API.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        }
        # Altered, empty, or another credential's: rejected too.
        altered = {**message, "reasoning_content": message["reasoning_content"] + " "}
        assert ask([user, altered, *_results(message)]).status_code == 400
        emptied = {**message, "reasoning_content": ""}
        assert ask([user, emptied, *_results(message)]).status_code == 400
        assert ask([user, message, *_results(message)], key="other").status_code == 400
        assert rejection_reasons(fake) == ["missing", "altered", "altered", "unknown"]

        # Sent back exactly: accepted; the next step is the parallel batch.
        ok = ask([user, message, *_results(message)])
        assert ok.status_code == 200, ok.text
        parallel = ok.json()["choices"][0]["message"]
        assert [c["function"]["name"] for c in parallel["tool_calls"]] == ["read_file", "list_dir"]
        assert [c["id"][:8] for c in parallel["tool_calls"]] == ["call_00_", "call_01_"]

        # Text turns: their reasoning is ignored (absent, or anything at all).
        history = [user, message, *_results(message), parallel, *_results(parallel)]
        text = ask(history).json()["choices"][0]["message"]
        assert text["content"] == FINAL_TEXTS[0]
        assert text["reasoning_content"]
        for variant in (_stripped(text), {**text, "reasoning_content": "made up"}):
            later = [*history, variant, {"role": "user", "content": "now read c.txt"}]
            assert ask(later).status_code == 200
        # A tool turn is checked in every later request, also after a new user question.
        later = [
            user,
            _stripped(message),
            *_results(message),
            text,
            {"role": "user", "content": "?"},
        ]
        assert ask(later).status_code == 400
        assert len(fake.rejections) == 5


def test_deepseek_fake_streams_like_deepseek() -> None:
    with running_deepseek_upstream(min_pieces=4) as (fake, root):
        body = {
            "model": DEEPSEEK.model,
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
        }
        response = _post(f"{root}/v1", body)
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [e for e in response.text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        chunks = [json.loads(e.removeprefix("data: "))["choices"][0] for e in events[:-1]]
        assert chunks[0]["delta"] == {"role": "assistant", "content": None, "reasoning_content": ""}
        pieces = [
            c["delta"]["reasoning_content"] for c in chunks if "reasoning_content" in c["delta"]
        ]
        pieces = [p for p in pieces if p is not None]
        (issued,) = fake.issued_log
        assert len(pieces) == 5 and pieces == list(issued.pieces)
        assert "".join(pieces) == issued.receipt
        entries = [e for c in chunks for e in c["delta"].get("tool_calls", [])]
        assert entries[0]["id"] == issued.call_ids[0] and entries[0]["index"] == 0
        assert all(set(e) == {"index", "function"} for e in entries[1:])
        arguments = "".join(e["function"]["arguments"] for e in entries)
        assert json.loads(arguments) == {"path": "a.txt"}
        assert [c["finish_reason"] for c in chunks].count("tool_calls") == 1
        # Reasoning comes strictly before the calls.
        first_call = next(n for n, c in enumerate(chunks) if "tool_calls" in c["delta"])
        assert all(not c["delta"].get("reasoning_content") for c in chunks[first_call:])


def test_openrouter_fake_enforces_its_rule() -> None:
    with running_openrouter_upstream() as (fake, root):
        base = f"{root}/api/v1"
        model = OPENROUTER.model
        user = {"role": "user", "content": "read a.txt"}
        first = _post(base, {"model": model, "messages": [user]})
        assert first.status_code == 200, first.text
        message = first.json()["choices"][0]["message"]
        details = message["reasoning_details"]
        assert [(d["type"], d["index"], d["format"]) for d in details] == [
            ("reasoning.text", 0, "google-gemini-v1"),
            ("reasoning.encrypted", 1, "google-gemini-v1"),
        ]
        assert details == fake.receipt_for([message["tool_calls"][0]["id"]])

        def ask(history: list[dict[str, Any]], key: str = "k") -> httpx.Response:
            return _post(base, {"model": model, "messages": history}, key)

        response = ask([user, _stripped(message), *_results(message)])
        assert response.status_code == 400
        assert response.json() == {"error": {"message": OPENROUTER_MISSING_MESSAGE, "code": 400}}
        assert response.json()["error"]["message"].startswith(
            "Gemini models require OpenRouter reasoning details to be preserved in each request."
        )
        reordered = {**message, "reasoning_details": details[::-1]}
        changed = copy.deepcopy(message)
        changed["reasoning_details"][1]["data"] = "x" + details[1]["data"]
        dropped = {**message, "reasoning_details": details[:1]}
        for wrong in (reordered, changed, dropped):
            response = ask([user, wrong, *_results(message)])
            assert response.status_code == 400
            assert "Corrupted thought signature." in response.json()["error"]["metadata"]["raw"]
        assert ask([user, message, *_results(message)], key="other").status_code == 400
        assert rejection_reasons(fake) == ["missing", "altered", "altered", "altered", "unknown"]

        ok = ask([user, message, *_results(message)])
        assert ok.status_code == 200, ok.text
        parallel = ok.json()["choices"][0]["message"]
        history = [user, message, *_results(message), parallel, *_results(parallel)]
        text = ask(history).json()["choices"][0]["message"]
        assert text["content"] == FINAL_TEXTS[0]
        # Text answers carry details too, and need them back.
        later = [*history, _stripped(text), {"role": "user", "content": "now read c.txt"}]
        assert ask(later).status_code == 400
        later[-2] = text
        assert ask(later).status_code == 200
        # An assistant message the fake never answered needs nothing.
        foreign = {"role": "assistant", "content": "Hi, how can I help?"}
        assert ask([user, foreign, {"role": "user", "content": "x"}]).status_code == 200


def test_openrouter_fake_streams_pieces_that_merge_into_the_array() -> None:
    with running_openrouter_upstream() as (fake, root):
        body = {
            "model": OPENROUTER.model,
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
        }
        response = _post(f"{root}/api/v1", body)
        assert response.text.startswith(": OPENROUTER PROCESSING\n\n")
        events = [e for e in response.text.split("\n\n") if e.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        deltas = [json.loads(e[6:])["choices"][0]["delta"] for e in events[:-1]]
        pieces = [d["reasoning_details"] for d in deltas if "reasoning_details" in d]
        (issued,) = fake.issued_log
        assert pieces == list(issued.pieces)
        text_pieces = [p for (p,) in pieces if p["index"] == 0]
        assert 2 <= len(text_pieces) <= 3
        assert "id" in text_pieces[0] and all("id" not in p for p in text_pieces[1:])
        merged_text = "".join(p["text"] for p in text_pieces)
        assert merged_text == issued.receipt[0]["text"] == issued.reasoning
        assert "".join(d.get("reasoning") or "" for d in deltas) == issued.reasoning
        # The encrypted entry rides on the first tool call's delta.
        (with_call,) = [d for d in deltas if "tool_calls" in d]
        assert with_call["reasoning_details"] == [issued.receipt[1]]
        assert all(d.get("role") == "assistant" for d in deltas)


# ── OpenAI Python SDK, rebuilding messages without the fields ────────────────


def _client(base_url: str, key: str = "sk-test", **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60, **kwargs)


def _ask(
    client: openai.OpenAI, model: str, messages: list[dict[str, Any]], mode: str
) -> dict[str, Any]:
    """One request; returns the assistant message as an app puts it back in the history:
    without reasoning fields."""
    kwargs: dict[str, Any] = {"model": model, "messages": messages, "tools": OPENAI_TOOLS}
    if mode == "stream":
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
        content = ""
        calls: dict[Any, dict[str, Any]] = {}
        for chunk in client.chat.completions.create(stream=True, **kwargs):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for tc in delta.tool_calls or []:
                call = calls.setdefault(
                    tc.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] += tc.id or ""
                if tc.function:
                    call["function"]["name"] += tc.function.name or ""
                    call["function"]["arguments"] += tc.function.arguments or ""
        rebuilt = {"role": "assistant", "content": content or None}
        if calls:
            rebuilt["tool_calls"] = list(calls.values())
        return rebuilt
    completion = client.chat.completions.create(**kwargs)
    dumped = completion.choices[0].message.model_dump(exclude_none=True)
    for name in REASONING_FIELDS:
        dumped.pop(name, None)
    return dumped


def _run_turn(client: openai.OpenAI, model: str, messages: list[dict[str, Any]], mode: str) -> str:
    for _ in range(5):
        assistant = _ask(client, model, messages, mode)
        messages.append(assistant)
        if not assistant.get("tool_calls"):
            return str(assistant.get("content"))
        for call in assistant["tool_calls"]:
            result = TOOL_RESULTS[call["function"]["name"]]
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
            )
    raise AssertionError("no text answer after 5 steps")


def _openai_flow(base_url: str, provider: Provider, mode: str, key: str = "sk-test") -> list[str]:
    """Turn 0 (three steps), a new question, turn 1 (a tool step, then text)."""
    client = _client(base_url, key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTIONS[0]}]
    texts = [_run_turn(client, provider.model, messages, mode)]
    messages.append({"role": "user", "content": QUESTIONS[1]})
    texts.append(_run_turn(client, provider.model, messages, mode))
    return texts


@pytest.mark.parametrize("mode", OPENAI_MODES)
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_openai_sdk_flow_through_proxy(provider: Provider, mode: str) -> None:
    with behind_proxy(provider) as (fake, _, proxy):
        assert _openai_flow(proxy, provider, mode) == FINAL_TEXTS
        assert fake.rejections == []
        assert step_counts(fake) == STEP_COUNTS
        assert assert_receipts_returned(fake, provider) > 0
        assert_last_request_complete(fake, provider)


@pytest.mark.parametrize("mode", ["create-stream", "create"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_openai_sdk_flow_without_proxy_gets_the_400(provider: Provider, mode: str) -> None:
    with provider.running() as (fake, root):
        with pytest.raises(openai.BadRequestError) as caught:
            _openai_flow(f"{root}{provider.api}", provider, mode)
        assert caught.value.status_code == 400
        assert provider.missing_error in caught.value.response.text
        assert fake.rejections == [Rejection("missing", 1)]
        assert len(fake.requests) == 2


# ── Vercel AI SDK (custom provider name) ─────────────────────────────────────


def _vercel(sdk: str, base_url: str, provider: Provider, **kwargs: Any) -> dict[str, Any]:
    return run_vercel_agent(
        sdk,
        base_url,
        provider.model,
        VERCEL_TOOLS,
        execute=TOOL_RESULTS,
        max_steps=5,
        **kwargs,
    )


def _without_reasoning_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as an app stores it when it keeps only text and tool parts."""
    kept = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, list):
            message = {**message, "content": [p for p in content if p.get("type") != "reasoning"]}
        kept.append(message)
    return kept


def _vercel_flow(
    sdk: str, base_url: str, provider: Provider, *, keep_reasoning: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    first = _vercel(sdk, base_url, provider, prompt=QUESTIONS[0])
    if first["errors"]:
        return first, {}
    earlier = first["responseMessages"]
    history = [
        {"role": "user", "content": QUESTIONS[0]},
        *(earlier if keep_reasoning else _without_reasoning_parts(earlier)),
        {"role": "user", "content": QUESTIONS[1]},
    ]
    return first, _vercel(sdk, base_url, provider, messages=history)


def _steps(result: dict[str, Any]) -> list[tuple[list[str], str | None]]:
    return [([c["toolName"] for c in s["toolCalls"]], s["finishReason"]) for s in result["steps"]]


def _reasoning_parts(messages: list[dict[str, Any]]) -> list[str]:
    """The reasoning the SDK parsed, per assistant message of a run."""
    return [
        "".join(p["text"] for p in m["content"] if p.get("type") == "reasoning")
        for m in messages
        if m.get("role") == "assistant" and isinstance(m.get("content"), list)
    ]


def assert_vercel_run(result: dict[str, Any], fake: Any, issued: list[Issued]) -> None:
    """The run's steps got exactly the calls and (parsed) reasoning the fake issued."""
    assert [[c["toolCallId"] for c in s["toolCalls"]] for s in result["steps"]] == [
        list(i.call_ids) for i in issued
    ]
    assert _reasoning_parts(result["responseMessages"]) == [i.reasoning for i in issued]


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("keep_reasoning", [False, True], ids=["stored-without-reasoning", "as-is"])
@pytest.mark.parametrize("sdk", VERCEL_SDKS)
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_vercel_flow_through_proxy(provider: Provider, sdk: str, keep_reasoning: bool) -> None:
    with behind_proxy(provider) as (fake, _, proxy):
        first, second = _vercel_flow(sdk, proxy, provider, keep_reasoning=keep_reasoning)
        assert first["errors"] == [], first["apiErrors"]
        assert second["errors"] == [], second["apiErrors"]
        assert _steps(first) == [
            (["read_file"], "tool-calls"),
            (["read_file", "list_dir"], "tool-calls"),
            ([], "stop"),
        ]
        assert _steps(second) == [(["read_file"], "tool-calls"), ([], "stop")]
        assert [first["text"], second["text"]] == FINAL_TEXTS
        assert fake.rejections == []
        assert step_counts(fake) == STEP_COUNTS
        # Reasoning reached the SDK unchanged, step by step.
        assert_vercel_run(first, fake, fake.issued_log[:3])
        assert_vercel_run(second, fake, fake.issued_log[3:])
        # The SDK sends `reasoning_content` itself for what it keeps (DeepSeek's field, and
        # OpenRouter's `reasoning` parsed as reasoning); receipts must be the issued ones.
        assert assert_receipts_returned(fake, provider, client_sends=True) > 0
        assert_last_request_complete(fake, provider)


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("sdk", VERCEL_SDKS)
def test_vercel_openrouter_without_proxy_gets_the_400(sdk: str) -> None:
    # No @ai-sdk/openai-compatible release reads or sends reasoning_details: step 2 fails.
    with running_openrouter_upstream() as (fake, root):
        result = _vercel(sdk, f"{root}/api/v1", OPENROUTER, prompt=QUESTIONS[0])
        assert [(e["status"], e["name"]) for e in result["apiErrors"]] == [(400, "AI_APICallError")]
        assert OPENROUTER_MISSING_MESSAGE in result["apiErrors"][0]["body"]
        assert fake.rejections == [Rejection("missing", 1)]


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("sdk", VERCEL_SDKS)
def test_vercel_deepseek_without_proxy(sdk: str) -> None:
    """Every release serializes its reasoning parts as `reasoning_content`, so within one run
    (and with a history that keeps reasoning parts) DeepSeek is satisfied without the proxy; a
    history stored without them gets the 400 on the new question."""
    with running_deepseek_upstream() as (fake, root):
        base = f"{root}/v1"
        first, second = _vercel_flow(sdk, base, DEEPSEEK, keep_reasoning=True)
        assert first["errors"] == second["errors"] == []
        assert fake.rejections == []
        # Tool-calling messages in the five requests: 0, 1, 2, then 2 and 3 in turn 1.
        assert assert_receipts_returned(fake, DEEPSEEK, client_sends=True) == 0 + 1 + 2 + 2 + 3
        try:
            first, second = _vercel_flow(sdk, base, DEEPSEEK, keep_reasoning=False)
        except VercelDriverError as exc:
            # ai 7 (v3): when a run's very first request fails, the driver prints its result
            # and then node exits 1 on an unhandled rejection; the printed result is intact.
            assert sdk == "v3", exc
            second = json.loads(str(exc).split("stdout:\n", 1)[1].splitlines()[0])
            first = {"errors": []}
        assert first["errors"] == []
        assert [(e["status"], e["name"]) for e in second["apiErrors"]] == [(400, "AI_APICallError")]
        assert DEEPSEEK_MESSAGE in second["apiErrors"][0]["body"]
        assert fake.rejections == [Rejection("missing", 1)]


# ── reasoning reaches the client unchanged; tool calls as always ─────────────


def _raw_stream(client: openai.OpenAI, model: str) -> tuple[list[Any], list[Any]]:
    """(per chunk: the choice's delta, per chunk: the finish reason) of one streamed request."""
    deltas, finishes = [], []
    kwargs = {
        "model": model,
        "messages": [{"role": "user", "content": "go"}],
        "tools": OPENAI_TOOLS,
    }
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            deltas.append(choice.delta)
            finishes.append(choice.finish_reason)
    return deltas, finishes


@pytest.mark.parametrize("emit", ["atomic", "incremental"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_reasoning_streams_through_unchanged(provider: Provider, emit: str) -> None:
    config = {"tool_calls.emit": emit}
    with behind_proxy(provider, config, min_pieces=5) as (fake, _, proxy):
        deltas, finishes = _raw_stream(_client(proxy), provider.model)
        (issued,) = fake.issued_log
        extras = [d.model_extra or {} for d in deltas]
        if provider is DEEPSEEK:
            pieces = [
                e["reasoning_content"] for e in extras if e.get("reasoning_content") is not None
            ]
            assert pieces == list(issued.pieces)
            assert "".join(pieces) == issued.receipt
        else:
            pieces = [e["reasoning_details"] for e in extras if "reasoning_details" in e]
            assert pieces == list(issued.pieces)
            assert "".join(e.get("reasoning") or "" for e in extras) == issued.reasoning
        # Tool calls: the core rules, unaffected by reasoning on the same deltas.
        entries = [tc for d in deltas for tc in d.tool_calls or []]
        (call_id,) = issued.call_ids
        opening = entries[0]
        assert (opening.index, opening.id, opening.type, opening.function.name) == (
            0,
            call_id,
            "function",
            "read_file",
        )
        if emit == "atomic":
            assert len(entries) == 1
        assert all(e.index == 0 and e.id is None for e in entries[1:])
        arguments = "".join(e.function.arguments or "" for e in entries)
        assert json.loads(arguments) == {"path": "a.txt"}
        assert [f for f in finishes if f] == ["tool_calls"]
        assert [d.role for d in deltas if d.role] == ["assistant"]


@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_non_streamed_reasoning_passes_through(provider: Provider) -> None:
    with behind_proxy(provider) as (fake, _, proxy):
        body = {"model": provider.model, "messages": [{"role": "user", "content": "go"}]}
        via_proxy = _post(proxy, body).json()
        (issued,) = fake.issued_log
        message = via_proxy["choices"][0]["message"]
        assert message[provider.field] == issued.receipt
        _, sent = fake.responses[-1]
        assert message == json.loads(sent)["choices"][0]["message"]


# ── a client's own reasoning is never overridden ─────────────────────────────


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_altered_client_reasoning_goes_upstream_as_issued(provider: Provider, stream: bool) -> None:
    """Issue 14 item 5: the value the upstream issued for this very turn wins over a copy the
    client altered (OpenAI's SDK accumulator concatenates reasoning_details' strings)."""
    with behind_proxy(provider) as (fake, _, proxy):
        user = {"role": "user", "content": "read a.txt"}
        first = _post(proxy, {"model": provider.model, "messages": [user]})
        message = first.json()["choices"][0]["message"]
        issued = message[provider.field]
        if provider is DEEPSEEK:
            own: Any = "The client's own reasoning."
        else:
            own = [{**issued[1], "data": "Y2xpZW50"}, issued[0]]
        sent = {**_stripped(message), provider.field: own}
        history = [user, sent, *_results(message)]
        body = {"model": provider.model, "stream": stream, "messages": history}
        response = _post(proxy, body)
        # The upstream got what it issued, not the client's altered copy, and accepted it.
        received = fake.requests[-1].json["messages"]
        assert received[1][provider.field] == issued != own
        assert rejection_reasons(fake) == []
        assert response.status_code == 200
        assert _metric_reaches(proxy.removesuffix("/v1"), f"{provider.field}_restored", 1) == 1
        # The stored receipt is still there for a client that sends nothing.
        history[1] = _stripped(message)
        assert _post(proxy, {**body, "messages": history}).status_code == 200
        assert fake.requests[-1].json["messages"][1][provider.field] == issued


# ── misses ───────────────────────────────────────────────────────────────────


def _call(call_id: str, name: str = "read_file") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_deepseek_miss_is_left_unchanged_and_counted(stream: bool) -> None:
    with (
        running_deepseek_upstream() as (fake, root),
        running_proxy(f"{root}/v1", **DEEPSEEK.proxy_config) as proxy,
    ):
        user = {"role": "user", "content": "read a.txt"}
        known = _post(f"{proxy}/v1", {"model": DEEPSEEK.model, "messages": [user]})
        message = known.json()["choices"][0]["message"]
        foreign = {"role": "assistant", "content": "", "tool_calls": [_call("call_00_elsewhere")]}
        history = [
            user,
            _stripped(message),
            *_results(message),
            foreign,
            {"role": "tool", "tool_call_id": "call_00_elsewhere", "content": "x"},
        ]
        before = _metric(proxy, "reasoning_content_missing")
        body = {"model": DEEPSEEK.model, "stream": stream, "messages": history}
        response = _post(f"{proxy}/v1", body)
        received = fake.requests[-1].json["messages"]
        # The known step got its receipt; the unknown one nothing (no invented reasoning).
        assert received[1]["reasoning_content"] == message["reasoning_content"]
        assert received[3:] == history[3:]
        # DeepSeek's 400 reaches the client unchanged.
        assert fake.rejections == [Rejection("missing", 3)]
        status, sent = fake.responses[-1]
        assert (response.status_code, response.content) == (status, sent)
        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/json")
        assert _metric_reaches(proxy, "reasoning_content_missing", before + 1) == before + 1


def test_openrouter_unknown_message_gets_nothing() -> None:
    # OpenRouter documents no placeholder: a message the proxy never saw goes as it is.
    with behind_proxy(OPENROUTER) as (fake, _, proxy):
        history = [
            {"role": "user", "content": "read a.txt"},
            {"role": "assistant", "content": "", "tool_calls": [_call("tool_read_file_x")]},
            {"role": "tool", "tool_call_id": "tool_read_file_x", "content": "x"},
            {"role": "assistant", "content": "It says x."},
            {"role": "user", "content": "and b.txt?"},
        ]
        response = _post(proxy, {"model": OPENROUTER.model, "messages": history})
        assert response.status_code == 200, response.text
        assert fake.requests[-1].json["messages"] == history


# ── tenants and upstreams ────────────────────────────────────────────────────


def _shared_ids(turn: int, step: int, position: int) -> str:
    return f"call_{position:02d}_shared{turn}{step}"


@pytest.mark.parametrize(
    "config", [{}, {"signatures.tenant_header": "x-tenant"}], ids=["credential", "tenant-header"]
)
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_tenants_never_see_each_others_reasoning(
    provider: Provider, stream: bool, config: dict[str, Any]
) -> None:
    """Two clients get the same call ids; each follow-up must carry its own client's receipt.
    Requests interleave, so a store keyed by call ids alone would hand over the other's."""
    by_header = bool(config)
    with behind_proxy(provider, config, fixed_ids=_shared_ids) as (fake, _, proxy):
        clients, histories = {}, {}
        for name in ("one", "two"):
            key = "sk-shared" if by_header else f"sk-{name}"
            headers = {"x-tenant": name} if by_header else {}
            clients[name] = _client(proxy, key, default_headers=headers)
            histories[name] = [{"role": "user", "content": "read a.txt"}]
        issued: dict[str, Any] = {}
        for name, client in clients.items():
            kwargs = {"model": provider.model, "messages": histories[name], "tools": OPENAI_TOOLS}
            if stream:
                with client.chat.completions.stream(**kwargs) as s:
                    message = s.get_final_completion().choices[0].message
            else:
                message = client.chat.completions.create(**kwargs).choices[0].message
            (call,) = message.tool_calls
            assert call.id == "call_00_shared00"
            issued[name] = fake.issued_log[-1].receipt
            rebuilt = {
                "role": "assistant",
                "content": "",
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
            }
            histories[name] += [rebuilt, {"role": "tool", "tool_call_id": call.id, "content": "x"}]
        assert issued["one"] != issued["two"]
        for name, client in clients.items():
            client.chat.completions.create(
                model=provider.model, messages=histories[name], tools=OPENAI_TOOLS
            )
            assert fake.requests[-1].json["messages"][1][provider.field] == issued[name], name
        assert fake.rejections == []


def test_receipts_stay_with_the_upstream_that_issued_them() -> None:
    """One proxy, three routes: DeepSeek, OpenRouter and a plain OpenAI-compatible upstream.
    DeepSeek and OpenRouter hand out the same call ids (to the same client), so only keys that
    name the upstream keep their receipts apart; and histories carried from one to another
    must arrive without the other's reasoning."""
    with (
        running_deepseek_upstream(fixed_ids=_shared_ids, seed=1) as (ds, ds_root),
        running_openrouter_upstream(fixed_ids=_shared_ids, seed=2) as (orr, or_root),
        running_fake_upstream() as (plain, plain_root),
    ):
        routes = [
            {"name": "ds", "models": ["deepseek-*"], "base_url": f"{ds_root}/v1"},
            {
                "name": "or",
                "models": ["google/*"],
                "base_url": f"{or_root}/api/v1",
                "profile": "openrouter",
            },
        ]
        with running_proxy(f"{plain_root}/v1", routes=routes) as root:
            proxy = f"{root}/v1"
            user = {"role": "user", "content": "read a.txt"}
            histories: dict[str, list[dict[str, Any]]] = {}
            for provider, stream in ((DEEPSEEK, True), (OPENROUTER, False)):
                body = {"model": provider.model, "stream": stream, "messages": [user]}
                assert _post(proxy, body).status_code == 200
                (call_id,) = (ds if provider is DEEPSEEK else orr).issued_log[-1].call_ids
                assert call_id == "call_00_shared00"
                histories[provider.name] = [
                    user,
                    {"role": "assistant", "content": "", "tool_calls": [_call(call_id)]},
                    {"role": "tool", "tool_call_id": call_id, "content": "x"},
                ]
            # Each upstream gets its own receipt back on the same ids, and nothing else.
            for provider, fake in ((DEEPSEEK, ds), (OPENROUTER, orr)):
                body = {"model": provider.model, "messages": histories[provider.name]}
                assert _post(proxy, body).status_code == 200
                received = fake.requests[-1].json["messages"][1]
                assert received[provider.field] == fake.issued_log[0].receipt
                assert set(received) - set(histories[provider.name][1]) == {provider.field}
            assert ds.rejections == orr.rejections == []

            # Fresh ids only one upstream issued: a history carried to another upstream (a chat
            # that switches models mid-way) arrives there without the reasoning.
            ds.fixed_ids = orr.fixed_ids = None
            for provider in (DEEPSEEK, OPENROUTER):
                fake = ds if provider is DEEPSEEK else orr
                assert (
                    _post(proxy, {"model": provider.model, "messages": [user]}).status_code == 200
                )
                (call_id,) = fake.issued_log[-1].call_ids
                history = [
                    user,
                    {"role": "assistant", "content": "", "tool_calls": [_call(call_id)]},
                    {"role": "tool", "tool_call_id": call_id, "content": "x"},
                ]
                # Proof that the proxy holds this receipt: the issuing upstream gets it back.
                assert (
                    _post(proxy, {"model": provider.model, "messages": history}).status_code == 200
                )
                assert fake.requests[-1].json["messages"][1][provider.field]
                others = [
                    (
                        orr if provider is DEEPSEEK else ds,
                        OPENROUTER.model if provider is DEEPSEEK else DEEPSEEK.model,
                    ),
                    (plain, "openai_indexed_parallel"),
                ]
                for other, model in others:
                    for stream in (False, True):
                        _post(proxy, {"model": model, "stream": stream, "messages": history})
                        received = [
                            r for r in other.requests if r.path.endswith("/chat/completions")
                        ]
                        assert received[-1].json["messages"] == history, (provider.name, model)
            # DeepSeek rejects OpenRouter's steps (it never issued them), without any reasoning.
            assert {r.reason for r in ds.rejections} == {"missing"}
            assert orr.rejections == []


# ── memory ───────────────────────────────────────────────────────────────────


def test_memory_store_stays_bounded_with_large_reasoning() -> None:
    budget = 2_000_000
    config = {"signatures.max_total_bytes": budget, "signatures.max_value_bytes": 400_000}
    with (
        running_deepseek_upstream(reasoning_chars=200_000) as (fake, root),
        proxy_app(f"{root}/v1", **DEEPSEEK.proxy_config, **config) as (app, proxy_root),
    ):
        store = app.state.proxy.store
        proxy = f"{proxy_root}/v1"
        conversations = []
        for n in range(50):
            user = {"role": "user", "content": f"question {n}"}
            body = {"model": DEEPSEEK.model, "stream": n % 2 == 0, "messages": [user]}
            assert _post(proxy, body).status_code == 200
            conversations.append((user, fake.issued_log[-1]))
            assert store.total_bytes <= budget, (n, store.total_bytes)
        assert 200_000 * 5 < store.total_bytes <= budget
        assert len(store) <= budget // 200_000

        def follow_up(n: int) -> httpx.Response:
            user, issued = conversations[n]
            (call_id,) = issued.call_ids
            history = [
                user,
                {"role": "assistant", "content": "", "tool_calls": [_call(call_id)]},
                {"role": "tool", "tool_call_id": call_id, "content": "x"},
            ]
            return _post(proxy, {"model": DEEPSEEK.model, "messages": history})

        # The newest receipt is kept, verbatim; the oldest gave way (a miss, left unchanged).
        assert follow_up(49).status_code == 200
        assert (
            fake.requests[-1].json["messages"][1]["reasoning_content"]
            == conversations[49][1].receipt
        )
        assert follow_up(0).status_code == 400
        assert "reasoning_content" not in fake.requests[-1].json["messages"][1]

        # A receipt over max_value_bytes is not stored, and counted.
        fake.reasoning_chars = 450_000
        before = _metric(proxy_root, "receipt_too_large")
        entries, total = len(store), store.total_bytes
        user = {"role": "user", "content": "one more"}
        assert (
            _post(proxy, {"model": DEEPSEEK.model, "stream": True, "messages": [user]}).status_code
            == 200
        )
        conversations.append((user, fake.issued_log[-1]))
        assert _metric_reaches(proxy_root, "receipt_too_large", before + 1) == before + 1
        assert (len(store), store.total_bytes) == (entries, total)
        assert follow_up(50).status_code == 400
        assert store.total_bytes <= budget


def test_memory_budget_holds_in_bytes_for_cjk_reasoning() -> None:
    """DeepSeek often reasons in Chinese: 3 bytes per character in UTF-8 (the unit of
    `max_value_bytes`). The budget is `max_total_bytes`; what the store holds, in bytes, must
    stay within it whatever the script."""
    budget = 2_000_000
    config = {"signatures.max_total_bytes": budget, "signatures.max_value_bytes": 400_000}
    cjk = "思考推理模型工具调用文件目录读取结果因此所以我们需要先然后"
    knobs = {"reasoning_chars": 100_000, "reasoning_alphabet": cjk}
    with (
        running_deepseek_upstream(**knobs) as (fake, root),
        proxy_app(f"{root}/v1", **DEEPSEEK.proxy_config, **config) as (app, proxy_root),
    ):
        store = app.state.proxy.store
        for n in range(30):
            body = {"model": DEEPSEEK.model, "messages": [{"role": "user", "content": f"q{n}"}]}
            assert _post(f"{proxy_root}/v1", body).status_code == 200
        per_receipt = len(
            json.dumps(
                {"reasoning_content": fake.issued_log[-1].receipt}, ensure_ascii=False
            ).encode()
        )
        assert per_receipt > 290_000
        assert store.total_bytes <= budget  # what the store counts (characters)
        held = len(store) * per_receipt
        assert held <= budget, (
            f"{len(store)} receipts of {per_receipt} UTF-8 bytes = {held} bytes held, "
            f"budget {budget}; store.total_bytes says {store.total_bytes}"
        )


# ── a shared store (Redis) ───────────────────────────────────────────────────


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


def test_redis_store_keeps_receipts_of_streams_the_client_closes_at_done(
    redis_server: RedisServer,
) -> None:
    """OpenAI's SDK stops reading at `[DONE]` and closes the response. The receipt is written
    after `[DONE]` went out; that write must not be lost when the client goes away."""
    store = redis.Redis.from_url(redis_server.url)
    config = {"signatures.store": redis_server.url}
    with behind_proxy(DEEPSEEK, config) as (fake, _, proxy):
        client = _client(proxy)
        count = 10
        for n in range(count):
            messages = [{"role": "user", "content": f"question {n}"}]
            for _ in client.chat.completions.create(
                model=DEEPSEEK.model, messages=messages, stream=True
            ):
                pass
            deadline = time.monotonic() + 2
            while store.dbsize() < n + 1 and time.monotonic() < deadline:
                time.sleep(0.02)
        assert len(fake.issued_log) == count
        assert store.dbsize() == count, f"{store.dbsize()} of {count} receipts were written"


@pytest.mark.parametrize("mode", ["stream", "create-stream"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_openai_sdk_flow_with_redis_store(
    redis_server: RedisServer, provider: Provider, mode: str
) -> None:
    with behind_proxy(provider, {"signatures.store": redis_server.url}) as (fake, _, proxy):
        try:
            _openai_flow(proxy, provider, mode)
        except openai.BadRequestError as exc:
            pytest.fail(
                f"request {len(fake.requests)} rejected: {fake.rejections}, "
                f"{exc.status_code} {exc.response.text}"
            )
        assert fake.rejections == []
        assert_receipts_returned(fake, provider)
