"""Reasoning-receipt flows through the proxy: the two providers (DeepSeek's reasoning_content,
OpenRouter's reasoning_details) with their fakes, the proxy in front of them, what the upstream
received, and the OpenAI Python SDK running the five-request flow with messages rebuilt without
the reasoning fields.

The flow: three steps (call, parallel calls, text), a new user question, then another tool step
and a text answer."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from starlette.applications import Starlette

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.support.proxies import running_proxy
from tests.support.reasoning_upstreams import (
    DEEPSEEK_MESSAGE,
    OPENROUTER_MISSING_MESSAGE,
    TWO_TURNS,
    TextStep,
    running_deepseek_upstream,
    running_openrouter_upstream,
    step_of,
    tool_calls_of,
)
from tests.support.sdk_agent import run_turn
from tests.support.servers import serve_in_thread
from tests.support.waiting import wait_until

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


def post_chat(base_url: str, body: dict[str, Any], key: str = "k") -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=60)


def repairs_total(proxy_root: str, kind: str) -> float:
    text = httpx.get(f"{proxy_root}/metrics", timeout=10).text
    pattern = rf'^streamfix_repairs_total\{{kind="{kind}",route="default"\}} (\S+)$'
    match = re.search(pattern, text, re.M)
    return float(match.group(1)) if match else 0.0


def wait_for_repairs_total(proxy_root: str, kind: str, value: float) -> float:
    """The exchange is counted when its response closed: poll briefly until the count reaches
    `value`; returns the count then seen (a caller asserting equality catches an overshoot)."""
    seen = [0.0]

    def reached() -> bool:
        seen[0] = repairs_total(proxy_root, kind)
        return seen[0] >= value

    what = f'streamfix_repairs_total{{kind="{kind}"}} to reach {value}'
    wait_until(reached, what, interval=0.02)
    return seen[0]


def without_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in REASONING_FIELDS}


def tool_results_for(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": c["id"], "content": "hello"} for c in message["tool_calls"]
    ]


def openai_client(base_url: str, key: str = "sk-test", **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60, **kwargs)


def _forget_reasoning(dumped: dict[str, Any]) -> None:
    for name in REASONING_FIELDS:
        dumped.pop(name, None)


def run_openai_flow(
    base_url: str, provider: Provider, mode: str, key: str = "sk-test"
) -> list[str]:
    """Turn 0 (three steps), a new question, turn 1 (a tool step, then text)."""
    client = openai_client(base_url, key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTIONS[0]}]
    texts = [run_turn(client, provider.model, messages, mode, _forget_reasoning)]
    messages.append({"role": "user", "content": QUESTIONS[1]})
    texts.append(run_turn(client, provider.model, messages, mode, _forget_reasoning))
    return texts


def tool_call(call_id: str, name: str = "read_file") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
