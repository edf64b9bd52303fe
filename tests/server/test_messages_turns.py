"""A Messages answer's turn, kept under its thinking block's signature (proxy/fronts/turns.py):
the follow-up that sends the block back gets the turn's receipts on its assistant message by
the token alone, through the real proxy against scripted upstreams that stream as DeepSeek and
Gemini do.

Each turn here is one the receipt store's own keys cannot name, so only the token can bring its
receipts back: DeepSeek's text-only turn (DeepSeek's rule keeps `reasoning_content` for tool
turns only) and a Gemini turn of reasoning and a signature with no text (text turns are named
by their text). The same history sent by a chat client, without the token, goes up without
them: the control that shows which path restored them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from proxy.store.memory_store import MemoryStore
from tests.fronts.messages_checks import parse, violations
from tests.support.proxies import running_proxy
from tests.support.raw_upstream import delta_chunk
from tests.support.servers import serve_in_thread

KEY = "sk-tenant"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
QUESTION = "what is 2+2?"
REASONING = "The user asks for a sum."
GEMINI_SIGNATURE = "CiQBcsjafE2kXoRIGb+2TtRtv7wH9h1Y0Q=="


chunk = delta_chunk

DEEPSEEK_TEXT_TURN = [
    # DeepSeek's thinking mode: reasoning first, its first chunk saying "" (content null).
    chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
    chunk({"content": None, "reasoning_content": REASONING[:9]}),
    chunk({"content": None, "reasoning_content": REASONING[9:]}),
    chunk({"content": "4", "reasoning_content": None}),
    chunk({"content": "", "reasoning_content": None}, "stop"),
    b"data: [DONE]\n\n",
]
GEMINI_REASONING_ONLY = [
    # Reasoning and the turn's signature, no text (a model that thought and said nothing).
    chunk({"role": "assistant", "reasoning_content": REASONING}),
    chunk(
        {"extra_content": {"google": {"thought_signature": GEMINI_SIGNATURE}}},
        "stop",
    ),
    b"data: [DONE]\n\n",
]
DONE_TEXT = [chunk({"role": "assistant", "content": "ok"}, "stop"), b"data: [DONE]\n\n"]


@contextmanager
def scripted(first: list[bytes]) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """An upstream that streams `first` to the first request and a short text to the rest;
    every request body it received."""
    received: list[dict[str, Any]] = []

    async def chat(request: Request) -> Response:
        received.append(orjson.loads(await request.body()))
        answer = first if len(received) == 1 else DONE_TEXT
        return StreamingResponse(iter(answer), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with serve_in_thread(app) as root:
        yield received, f"{root}/v1"


def ask(proxy: str, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "m", "max_tokens": 100, "stream": True, "messages": messages}
    return httpx.post(f"{proxy}/v1/messages", json=body, headers=HEADERS, timeout=30)


def content_blocks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answer's blocks as a client assembles them (what Claude Code sends back)."""
    blocks: list[dict[str, Any]] = []
    for event in events:
        if event["type"] == "content_block_start":
            blocks.append(dict(event["content_block"]))
        elif event["type"] == "content_block_delta":
            delta, block = event["delta"], blocks[-1]
            for name in ("text", "thinking", "signature"):
                if name in delta:
                    block[name] = block.get(name, "") + delta[name]
    return blocks


def follow_up(proxy: str) -> list[dict[str, Any]]:
    """Two turns through the Messages front: the second sends the first answer back as
    received. Returns the second turn's messages."""
    first = ask(proxy, [{"role": "user", "content": QUESTION}])
    events = parse(first.content)
    assert violations(events) == []
    blocks = content_blocks(events)
    assert blocks[0]["type"] == "thinking" and blocks[0]["signature"]
    return [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": "and 3+3?"},
    ]


def repairs_of(response: httpx.Response) -> str:
    return response.headers.get("x-streamfix-repairs", "")


@pytest.mark.parametrize(
    ("profile", "answer", "field", "issued"),
    [
        ("deepseek", DEEPSEEK_TEXT_TURN, "reasoning_content", REASONING),
        (
            "gemini",
            GEMINI_REASONING_ONLY,
            "extra_content",
            {"google": {"thought_signature": GEMINI_SIGNATURE}},
        ),
    ],
    ids=["deepseek-text-turn", "gemini-reasoning-only"],
)
def test_a_turn_the_store_cannot_name_gets_its_receipts_back_by_the_signature_alone(
    profile: str, answer: list[bytes], field: str, issued: Any
) -> None:
    with (
        scripted(answer) as (received, upstream),
        running_proxy(upstream, **{"upstream.profile": profile}) as proxy,
    ):
        messages = follow_up(proxy)
        second = ask(proxy, messages)
        assert second.status_code == 200
        assert "messages_receipts_restored" in repairs_of(second)
        # Control: the same history from a chat client, which carries no token.
        chat_history = [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "4" if profile == "deepseek" else ""},
            {"role": "user", "content": "and 3+3?"},
        ]
        httpx.post(
            f"{proxy}/v1/chat/completions",
            json={"model": "m", "stream": True, "messages": chat_history},
            headers={"authorization": f"Bearer {KEY}"},
            timeout=30,
        )
    assistant = received[1]["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant[field] == issued
    assert field not in received[2]["messages"][1]


def test_a_signature_whose_turn_is_gone_is_counted() -> None:
    """A signature this proxy minted for this tenant, whose turn the store no longer holds
    (another replica's memory store, a TTL): the request goes on, the miss is counted."""
    with scripted(DEEPSEEK_TEXT_TURN) as (received, upstream):
        with running_proxy(upstream, **{"upstream.profile": "deepseek"}) as proxy:
            messages = follow_up(proxy)
        with running_proxy(upstream, **{"upstream.profile": "deepseek"}) as fresh:
            second = ask(fresh, messages)
    assert second.status_code == 200
    assert "messages_receipt_token_unknown:1" in repairs_of(second)
    assert "reasoning_content" not in received[1]["messages"][1]


def test_a_failed_turn_write_is_counted_and_the_answer_still_goes_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def failing(self: MemoryStore, items: dict[str, Any]) -> bool:
        return False

    monkeypatch.setattr(MemoryStore, "put_many", failing)

    def upstream(request: httpx.Request) -> httpx.Response:
        if orjson.loads(request.content).get("stream"):
            stream = b"".join(DEEPSEEK_TEXT_TURN)
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=stream
            )
        message = {"role": "assistant", "content": "4", "reasoning_content": REASONING}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return httpx.Response(200, json={"object": "chat.completion", "choices": [choice]})

    settings = Settings().with_values(
        {"upstream.base_url": "http://up.test/v1", "upstream.profile": "deepseek"}
    )
    app = create_app(settings, transport=httpx.MockTransport(upstream))
    body = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "q"}]}

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            streamed = await client.post(
                "/v1/messages", json={**body, "stream": True}, headers=HEADERS
            )
            whole = await client.post("/v1/messages", json=body, headers=HEADERS)
            return [streamed, whole]

    streamed, whole = asyncio.run(run())
    assert parse(streamed.content)[-1]["type"] == "message_stop"
    assert whole.status_code == 200 and whole.json()["content"][0]["type"] == "thinking"
    assert "messages_store_failed:1" in repairs_of(whole)  # a whole answer's head has them all
    metrics = app.state.proxy.metrics.exposition().decode()
    assert 'streamfix_repairs_total{kind="messages_store_failed",route="default"} 2.0' in metrics
