"""Reasoning receipts and the receipt store, through the real proxy: the memory store stays
within its budget with large reasoning (counted in bytes, CJK included), and with
`signatures.store = "redis://…"` against a real redis-server the receipts of streams survive a
client that closes at `[DONE]`, as OpenAI's SDK does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
import redis

from tests.support.reasoning_flows import (
    DEEPSEEK,
    PROVIDERS,
    Provider,
    assert_receipts_returned,
    behind_proxy,
    openai_client,
    post_chat,
    proxy_app,
    repairs_total,
    run_openai_flow,
    tool_call,
    wait_for_repairs_total,
)
from tests.support.reasoning_upstreams import (
    running_deepseek_upstream,
)
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.waiting import wait_until


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
            assert post_chat(proxy, body).status_code == 200
            conversations.append((user, fake.issued_log[-1]))
            assert store.total_bytes <= budget, (n, store.total_bytes)
        assert 200_000 * 5 < store.total_bytes <= budget
        assert len(store) <= budget // 200_000

        def follow_up(n: int) -> httpx.Response:
            user, issued = conversations[n]
            (call_id,) = issued.call_ids
            history = [
                user,
                {"role": "assistant", "content": "", "tool_calls": [tool_call(call_id)]},
                {"role": "tool", "tool_call_id": call_id, "content": "x"},
            ]
            return post_chat(proxy, {"model": DEEPSEEK.model, "messages": history})

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
        before = repairs_total(proxy_root, "receipt_too_large")
        entries, total = len(store), store.total_bytes
        user = {"role": "user", "content": "one more"}
        assert (
            post_chat(
                proxy, {"model": DEEPSEEK.model, "stream": True, "messages": [user]}
            ).status_code
            == 200
        )
        conversations.append((user, fake.issued_log[-1]))
        assert wait_for_repairs_total(proxy_root, "receipt_too_large", before + 1) == before + 1
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
            assert post_chat(f"{proxy_root}/v1", body).status_code == 200
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
        client = openai_client(proxy)
        count = 10
        for n in range(count):
            messages = [{"role": "user", "content": f"question {n}"}]
            for _ in client.chat.completions.create(
                model=DEEPSEEK.model, messages=messages, stream=True
            ):
                pass
            wait_until(
                lambda written=n + 1: store.dbsize() >= written,
                f"receipt {n + 1} of {count} in Redis",
                timeout=2,
                interval=0.02,
            )
        assert len(fake.issued_log) == count
        assert store.dbsize() == count, f"{store.dbsize()} of {count} receipts were written"


@pytest.mark.parametrize("mode", ["stream", "create-stream"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_openai_sdk_flow_with_redis_store(
    redis_server: RedisServer, provider: Provider, mode: str
) -> None:
    with behind_proxy(provider, {"signatures.store": redis_server.url}) as (fake, _, proxy):
        try:
            run_openai_flow(proxy, provider, mode)
        except openai.BadRequestError as exc:
            pytest.fail(
                f"request {len(fake.requests)} rejected: {fake.rejections}, "
                f"{exc.status_code} {exc.response.text}"
            )
        assert fake.rejections == []
        assert_receipts_returned(fake, provider)
