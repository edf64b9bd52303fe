"""Any replica answers any turn: two `python -m proxy serve` processes on one real Redis, every
request of a conversation going to the other replica than the one before, for every kind of
state a follow-up needs. The clients drop what the upstream attached (as almost all do), and
each fake upstream refuses a follow-up without it, with its real error: every follow-up it
accepted got its receipt from the replica that did not see the turn, through Redis.

- Gemini's thought signatures, DeepSeek's `reasoning_content`, OpenRouter's `reasoning_details`
  (the OpenAI Python SDK's tool loop, streamed and not);
- Kimi's reused call ids (Open WebUI's loop): rewritten from the request's own history, the
  same on every replica, so round three, sent to the first replica with round two's ids as the
  second rewrote them, is accepted;
- a parameter refusal learned on one replica: the other sends the request adjusted at once;
  a model's completion limit likewise, its number carried through Redis;
- the Responses API: `previous_response_id`, and `encrypted_content` tokens with `store:
  false` (one STREAMFIX_RECEIPT_SECRET on both);
- the Messages API: thinking blocks whose signature one replica minted and the other reads;
  the input tokens per byte one replica learned from an answer, which the other's
  `count_tokens` counts with at once.

One Redis, the fakes and the two replicas serve the whole module (each test its own tenant).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
import redis

from tests.fronts.responses.responses_flows import run_flow
from tests.support.claude_code_requests import claude_code_request
from tests.support.gemini_upstream import (
    THREE_STEPS,
    TOOL_SCHEMAS,
    GeminiUpstream,
    TextStep,
    running_gemini_upstream,
)
from tests.support.limit_upstreams import deepseek_budget_refusal
from tests.support.proxies import running_proxy
from tests.support.proxy_process import ServedProxy
from tests.support.reasoning_flows import FINAL_TEXTS, QUESTIONS
from tests.support.reasoning_upstreams import (
    DeepSeekUpstream,
    OpenRouterUpstream,
    running_deepseek_upstream,
    running_openrouter_upstream,
)
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.rejecting_upstream import (
    RejectingUpstream,
    groq_unsupported,
    running_rejecting_upstream,
)
from tests.support.replicas import (
    RoundRobinOpenWebUI,
    replica_config,
    round_robin_chat,
    running_replicas,
    scraped,
)
from tests.support.strict_upstream import (
    FINAL_ANSWER,
    ROUND_ONE,
    StrictUpstream,
    running_strict_upstream,
)
from tests.support.token_counting_upstream import (
    TokenCountingUpstream,
    running_token_counting_upstream,
)
from tests.support.waiting import wait_until

GEMINI_MODEL = "gemini-3-flash-preview"
DEEPSEEK_MODEL = "deepseek-v4-flash"
OPENROUTER_MODEL = "google/gemini-3-pro-preview"
REFUSING_MODEL = "refusing-m"
GEMINI_FINAL = next(s.text for s in THREE_STEPS if isinstance(s, TextStep))
# What the proxy makes of Kimi's round two (tests/flows/test_conversation_integrity.py).
KIMI_ROUND_TWO = [
    "functions.search_web:0",
    "functions.search_web:5",
    "functions.search_web:6",
    "functions.search_web:7",
    "functions.search_web:8",
]


@dataclass
class Upstreams:
    gemini: GeminiUpstream
    deepseek: DeepSeekUpstream
    openrouter: OpenRouterUpstream
    kimi: StrictUpstream
    refusing: RejectingUpstream
    counting: TokenCountingUpstream
    routes: list[dict[str, Any]]


@dataclass
class Replicas:
    first: ServedProxy
    second: ServedProxy
    redis: RedisServer
    upstreams: Upstreams

    @property
    def urls(self) -> list[str]:
        return [self.first.url, self.second.url]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


@pytest.fixture(scope="module")
def upstreams() -> Iterator[Upstreams]:
    refusing = RejectingUpstream(
        {
            "store": groq_unsupported("store", "stop"),
            "max_tokens": lambda asked: (
                (400, deepseek_budget_refusal(8192)) if asked > 8192 else None
            ),
        }
    )
    with (
        running_gemini_upstream(THREE_STEPS) as (gemini, gemini_root),
        running_deepseek_upstream() as (deepseek, deepseek_root),
        running_openrouter_upstream() as (openrouter, openrouter_root),
        running_strict_upstream() as (kimi, kimi_root),
        running_rejecting_upstream(refusing) as refusing_url,
        running_token_counting_upstream() as (counting, counting_url),
    ):
        routes = [
            route("gemini", "gemini-*", f"{gemini_root}/v1beta/openai", "gemini"),
            route("deepseek", "deepseek-*", f"{deepseek_root}/v1", "deepseek"),
            route("openrouter", "google/*", f"{openrouter_root}/api/v1", "openrouter"),
            route("kimi", "kimi-*", f"{kimi_root}/v1", "kimi"),
            route("refusing", REFUSING_MODEL, refusing_url, "generic"),
            route("counting", "counting-*", counting_url, "generic"),
        ]
        yield Upstreams(gemini, deepseek, openrouter, kimi, refusing, counting, routes)


def route(name: str, pattern: str, base_url: str, profile: str) -> dict[str, Any]:
    return {"name": name, "models": [pattern], "base_url": base_url, "profile": profile}


@pytest.fixture(scope="module")
def replicas(
    redis_server: RedisServer, upstreams: Upstreams, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    path = tmp_path_factory.mktemp("replicas") / "streamfix.toml"
    config = replica_config(path, {"store": redis_server.url}, upstreams.routes)
    with running_replicas(config) as (first, second):
        yield Replicas(first, second, redis_server, upstreams)


def injected(replicas: Replicas, kind: str, route_name: str) -> list[float]:
    name = "streamfix_repairs_total"
    return [scraped(url, name, kind=f"{kind}_injected", route=route_name) for url in replicas.urls]


# ── the receipts of the chat API ─────────────────────────────────────────────


@pytest.mark.parametrize("mode", ["stream", "create"])
def test_gemini_signatures_reach_the_other_replica(replicas: Replicas, mode: str) -> None:
    fake = replicas.upstreams.gemini
    before = fake.rejections
    finals = round_robin_chat(replicas.urls, GEMINI_MODEL, mode, f"sk-gemini-{mode}")
    assert finals == [GEMINI_FINAL, GEMINI_FINAL]
    assert fake.rejections == before
    # Every follow-up carried a signature the fake issued, none Google's placeholder: each
    # replica injected signatures the other had captured.
    assert all(count > 0 for count in injected(replicas, "signatures", "gemini"))
    assert (
        scraped(
            replicas.first.url,
            "streamfix_repairs_total",
            kind="signatures_placeholders",
            route="gemini",
        )
        == 0
    )


@pytest.mark.parametrize("mode", ["stream", "create"])
def test_deepseek_reasoning_content_reaches_the_other_replica(
    replicas: Replicas, mode: str
) -> None:
    fake = replicas.upstreams.deepseek
    finals = round_robin_chat(replicas.urls, DEEPSEEK_MODEL, mode, f"sk-deepseek-{mode}")
    assert finals == FINAL_TEXTS
    assert fake.rejections == []
    assert all(count > 0 for count in injected(replicas, "reasoning_content", "deepseek"))


@pytest.mark.parametrize("mode", ["stream", "create"])
def test_openrouter_reasoning_details_reach_the_other_replica(
    replicas: Replicas, mode: str
) -> None:
    fake = replicas.upstreams.openrouter
    finals = round_robin_chat(replicas.urls, OPENROUTER_MODEL, mode, f"sk-openrouter-{mode}")
    assert finals == FINAL_TEXTS
    assert fake.rejections == []
    assert all(count > 0 for count in injected(replicas, "reasoning_details", "openrouter"))


def test_without_a_shared_store_the_same_round_robin_is_refused(
    replicas: Replicas,
) -> None:
    """The control: two replicas each with its own memory store, the same DeepSeek loop."""
    root = replicas.upstreams.routes[1]["base_url"]
    fake = replicas.upstreams.deepseek
    deepseek = {"upstream.profile": "deepseek"}
    with (
        running_proxy(root, **deepseek) as first,
        running_proxy(root, **deepseek) as second,
        pytest.raises(openai.BadRequestError, match="reasoning_content"),
    ):
        round_robin_chat([first, second], DEEPSEEK_MODEL, "create", "sk-deepseek-memory")
    assert fake.rejections, "a replica without the other's receipts was not refused"
    fake.rejections.clear()


def test_kimi_reused_ids_are_rewritten_alike_on_every_replica(replicas: Replicas) -> None:
    fake = replicas.upstreams.kimi
    question = {"role": "user", "content": "What is new in EV batteries?"}
    client = RoundRobinOpenWebUI([f"{url}/v1" for url in replicas.urls], stream=True)
    turn = client.run_turn([question])
    assert turn.error is None, turn.error.text if turn.error else ""
    assert turn.answer == FINAL_ANSWER.text
    assert len(set(client.sent_to)) == 2
    last = fake.requests[-1].json["messages"]
    ids = [call["id"] for message in last for call in message.get("tool_calls") or ()]
    assert ids == [call.id for call in ROUND_ONE.calls] + KIMI_ROUND_TWO


def test_a_refusal_learned_on_one_replica_adjusts_the_other_at_once(replicas: Replicas) -> None:
    fake = replicas.upstreams.refusing
    body = {"model": REFUSING_MODEL, "messages": [{"role": "user", "content": "hi"}], "store": True}
    headers = {"authorization": "Bearer sk-refusing"}
    sent = len(fake.requests)
    first = httpx.post(f"{replicas.first.url}/v1/chat/completions", json=body, headers=headers)
    assert first.status_code == 200, first.text
    assert len(fake.requests) == sent + 2  # refused, then sent again without `store`
    with redis.Redis.from_url(replicas.redis.url) as client:
        wait_until(
            lambda: list(client.scan_iter(match="streamfix:learned:*:store")),
            "the learned rule in Redis",
        )
    second = httpx.post(f"{replicas.second.url}/v1/chat/completions", json=body, headers=headers)
    assert second.status_code == 200, second.text
    assert "parameter_dropped:1" in second.headers["x-streamfix-repairs"]
    assert len(fake.requests) == sent + 3  # one request, already without it
    assert "store" not in fake.bodies()[-1]


def test_a_limit_learned_on_one_replica_lowers_the_budget_on_the_other_at_once(
    replicas: Replicas,
) -> None:
    fake = replicas.upstreams.refusing
    question = [{"role": "user", "content": "hi"}]
    body = {"model": REFUSING_MODEL, "messages": question, "max_tokens": 32000}
    headers = {"authorization": "Bearer sk-refusing"}
    sent = len(fake.requests)
    first = httpx.post(f"{replicas.first.url}/v1/chat/completions", json=body, headers=headers)
    assert first.status_code == 200, first.text
    assert "max_tokens_limit_learned:1" in first.headers["x-streamfix-repairs"]
    assert [b["max_tokens"] for b in fake.bodies()[sent:]] == [32000, 8192]
    with redis.Redis.from_url(replicas.redis.url) as client:
        wait_until(
            lambda: list(client.scan_iter(match="streamfix:learned:*:max_tokens_limit")),
            "the learned limit in Redis",
        )
    second = httpx.post(f"{replicas.second.url}/v1/chat/completions", json=body, headers=headers)
    assert second.status_code == 200, second.text
    assert second.headers["x-streamfix-repairs"] == "max_tokens_clamped:1"
    assert [b["max_tokens"] for b in fake.bodies()[sent:]] == [32000, 8192, 8192]


# ── the fronts ───────────────────────────────────────────────────────────────


@pytest.mark.parametrize("mode", ["previous", "history"])
def test_responses_state_and_tokens_reach_the_other_replica(replicas: Replicas, mode: str) -> None:
    """`previous`: `previous_response_id` (the transcript in Redis); `history`: `store: false`
    with `encrypted_content` tokens one replica minted and the other reads."""
    fake = replicas.upstreams.deepseek
    urls = [f"{url}/v1" for url in replicas.urls]
    finals, responses = run_flow(urls, DEEPSEEK_MODEL, QUESTIONS, mode, True, f"sk-resp-{mode}")
    assert finals == FINAL_TEXTS
    assert fake.rejections == []
    assert len(responses) >= 4


def test_messages_thinking_signatures_reach_the_other_replica(replicas: Replicas) -> None:
    tools = [{"name": n, "description": n, "input_schema": s} for n, s in TOOL_SCHEMAS.items()]
    clients = [
        anthropic.Anthropic(base_url=url, api_key="sk-messages", max_retries=0)
        for url in replicas.urls
    ]
    fake = replicas.upstreams.openrouter
    messages: list[Any] = []
    finals, sent, repairs = [], 0, []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        for _ in range(5):
            raw = clients[sent % 2].messages.with_raw_response.create(
                model=OPENROUTER_MODEL, max_tokens=1024, messages=messages, tools=tools
            )
            sent += 1
            repairs.append(raw.headers.get("x-streamfix-repairs", ""))
            message = raw.parse()
            content = [block.model_dump() for block in message.content]
            assert any(block["type"] == "thinking" for block in content), content
            messages.append({"role": "assistant", "content": content})  # as received
            calls = [block for block in content if block["type"] == "tool_use"]
            if not calls:
                finals.append("".join(b["text"] for b in content if b["type"] == "text"))
                break
            results = [
                {"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}
                for call in calls
            ]
            messages.append({"role": "user", "content": results})
    assert finals == FINAL_TEXTS
    assert fake.rejections == []
    # Each replica read the signatures the other minted (a foreign one would be dropped).
    assert not any("thinking_signature_dropped" in line for line in repairs), repairs


def test_a_token_ratio_learned_on_one_replica_counts_on_the_other(replicas: Replicas) -> None:
    """One exchange through the first replica teaches the model's input tokens per byte; the
    second's `count_tokens` (Anthropic's SDK) is then within 10 % of the upstream's own count
    of a Claude Code-sized request, where before it was the estimate."""
    fake = replicas.upstreams.counting
    first, second = (
        anthropic.Anthropic(base_url=url, api_key="sk-ratio", max_retries=0)
        for url in replicas.urls
    )
    model = "counting-replicas"
    asked = claude_code_request(11, 6, model=model, stream=False)
    fields = {k: v for k, v in asked.items() if k not in ("stream", "max_tokens")}
    header = "x-streamfix-token-count"
    assert second.messages.with_raw_response.count_tokens(**fields).headers[header] == "estimate"
    taught = claude_code_request(12, 2, model=model, stream=False)
    first.messages.create(**{k: v for k, v in taught.items() if k != "stream"})
    wait_until(  # written to Redis in the background
        lambda: (
            second.messages.with_raw_response.count_tokens(**fields)
            .headers[header]
            .startswith("learned")
        ),
        "the second replica to count with what the first learned",
    )
    counted = second.messages.count_tokens(**fields).input_tokens
    second.messages.create(**{k: v for k, v in asked.items() if k != "stream"})
    actual = fake.usages[-1]["prompt_tokens"]
    assert abs(counted - actual) <= 0.10 * actual, (counted, actual)
