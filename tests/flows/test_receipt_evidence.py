"""Receipts follow the evidence (the `generic` profile), end to end: the real proxy on 127.0.0.1, in
front of upstreams whose host says nothing, with no profile configured, and real clients.

- A Vertex-shaped upstream (signatures under `extra_content.vertex`) serving a model whose name
  has no vendor word: before, its signatures were dropped and every second tool round got 400.
- The same upstream, with a client that sends the signature back itself (as the OpenAI Node
  SDK's stream helper does): before, the proxy stripped it as foreign metadata, and got 400.
- An OpenRouter-shaped upstream serving `google/gemini-…`: before, the model name gave it
  Gemini's rules, so its reasoning_details were not kept (400) and Google's placeholder went
  into requests bound for a non-Google gateway.
- A Gemini answer whose call came without an id and whose signature sits on the message: before,
  the signature was neither kept nor left on the client's follow-up (stripped as foreign).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.gemini_upstream import THREE_STEPS, running_gemini_upstream, signature_of
from tests.support.proxies import running_proxy
from tests.support.servers import serve_in_thread

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
]


def run_agent(base_url: str, model: str, *, keep_receipts: bool) -> list[int]:
    """The three-step tool loop with the OpenAI SDK (non-streamed): statuses of each round.
    `keep_receipts`: send each assistant message back as received (extra_content included), as
    the Node SDK's helper does; otherwise rebuild it without, as most Python code does."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-evidence", max_retries=0, timeout=30)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read a.txt"}]
    statuses = []
    for _ in range(len(THREE_STEPS)):
        try:
            completion = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        except openai.APIStatusError as error:
            statuses.append(error.status_code)
            break
        statuses.append(200)
        message = completion.choices[0].message.model_dump(exclude_none=True)
        calls = message.get("tool_calls") or []
        if not calls:
            break
        if not keep_receipts:
            message["tool_calls"] = [
                {k: v for k, v in call.items() if k != "extra_content"} for call in calls
            ]
        messages.append(message)
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
    return statuses


@pytest.mark.parametrize("keep_receipts", [False, True], ids=["client-drops", "client-keeps"])
def test_a_vertex_shaped_upstream_on_loopback_gets_its_signatures_back(keep_receipts) -> None:
    with (
        running_gemini_upstream(THREE_STEPS, namespace="vertex") as (fake, root),
        running_proxy(f"{root}/v1beta/openai") as proxy,
    ):
        statuses = run_agent(f"{proxy}/v1", "my-model", keep_receipts=keep_receipts)
        metrics = httpx.get(f"{proxy}/metrics", timeout=10).text
    assert statuses == [200, 200, 200], statuses
    assert fake.rejections == 0
    # What went upstream carried the Vertex-shaped signature, never Google's placeholder.
    for request in fake.requests[1:]:
        for message in request.json["messages"]:
            for call in message.get("tool_calls") or []:
                assert signature_of(call) != "skip_thought_signature_validator"
    assert 'kind="signatures_placeholders"' not in metrics


def test_without_the_proxy_the_dropping_client_gets_the_400() -> None:
    # The fake enforces the rule: a second round without the signature is refused.
    with running_gemini_upstream(THREE_STEPS, namespace="vertex") as (fake, root):
        statuses = run_agent(f"{root}/v1beta/openai", "my-model", keep_receipts=False)
    assert statuses == [200, 400]
    assert fake.rejections == 1


# ── a message-level signature on a tool turn whose call came without an id (issue 26) ──

MESSAGE_SIGNATURE = "AVSo" + "c2lnbmVkIG9uIHRoZSBtZXNzYWdl" * 3


def _idless_signed_turn(signature: str) -> dict[str, Any]:
    """A non-streamed Gemini answer as Google's OpenAI endpoint gave it in mid-2025: the call
    with `id: ""`, the thought signature on the message, not on the call."""
    message = {
        "role": "assistant",
        "extra_content": {"google": {"thought": True, "thought_signature": signature}},
        "tool_calls": [
            {
                "id": "",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
            }
        ],
    }
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    return {"id": "gen-1", "object": "chat.completion", "created": 1, "choices": [choice]}


@contextmanager
def _message_signing_upstream() -> Iterator[tuple[list[dict[str, Any]], str]]:
    """Answers the first request with `_idless_signed_turn`; refuses a follow-up whose tool
    turn does not carry the signature back on the message (Google's 400), else answers text."""
    signature = MESSAGE_SIGNATURE
    received: list[dict[str, Any]] = []

    async def chat(request: Request) -> Response:
        body = orjson.loads(await request.body())
        received.append(body)
        turns = [m for m in body["messages"] if m.get("tool_calls")]
        if not turns:
            return Response(orjson.dumps(_idless_signed_turn(signature)))
        if signature_of(turns[0]) != signature:
            error = {
                "code": 400,
                "message": "missing thought_signature",
                "status": "INVALID_ARGUMENT",
            }
            return Response(orjson.dumps([{"error": error}]), status_code=400)
        text = {"role": "assistant", "content": "It says hello."}
        choice = {"index": 0, "message": text, "finish_reason": "stop"}
        return Response(orjson.dumps({"id": "gen-2", "choices": [choice]}))

    app = Starlette(routes=[Route("/v1beta/openai/chat/completions", chat, methods=["POST"])])
    with serve_in_thread(app) as root:
        yield received, f"{root}/v1beta/openai"


@pytest.mark.parametrize("keep_receipts", [True, False], ids=["client-keeps", "client-drops"])
def test_a_message_signature_on_an_idless_tool_turn_reaches_the_follow_up(keep_receipts) -> None:
    # Before: the signature on a tool turn's message matched no rule, so nothing was kept, and
    # on the follow-up the evidence profile stripped the client's copy as foreign metadata (or
    # had none to put back): Google's 400.
    with _message_signing_upstream() as (received, base), running_proxy(base) as proxy:
        client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-e", max_retries=0, timeout=30)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "read a.txt"}]
        first = client.chat.completions.create(model="my-model", messages=messages, tools=TOOLS)
        message = first.choices[0].message.model_dump(exclude_none=True)
        call_id = message["tool_calls"][0]["id"]
        assert call_id  # the proxy gave the id-less call one
        if not keep_receipts:
            message.pop("extra_content")
        messages += [message, {"role": "tool", "tool_call_id": call_id, "content": "hello"}]
        try:
            client.chat.completions.create(model="my-model", messages=messages, tools=TOOLS)
        except openai.BadRequestError as error:
            pytest.fail(f"follow-up refused: {error}; sent {received[-1]['messages'][1]}")
    assert signature_of(received[1]["messages"][1]) == MESSAGE_SIGNATURE
