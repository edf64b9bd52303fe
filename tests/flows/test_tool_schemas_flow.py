"""Tool schemas through the real proxy: a Gemini-like server under uvicorn that rejects what
Gemini's OpenAI endpoint rejects (its 400 body, tests/repair/repairs/test_tool_schemas.py
`fake_gemini`) refuses an agent's request sent straight to it; through the proxy, on a route
whose dialect is Gemini's, the OpenAI SDK's same request is answered. A request that needs no
rewrite reaches the server byte for byte."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.repair.dialects.samples import ALREADY_FINE, EDIT_TOOL, MCP_TOOL
from tests.repair.repairs.test_tool_schemas import fake_gemini
from tests.support.proxies import running_proxy
from tests.support.servers import serve_in_thread

ANSWER = {
    "id": "chatcmpl-g",
    "object": "chat.completion",
    "created": 1,
    "model": "gemini-2.5-flash",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Done."}, "finish_reason": "stop"}
    ],
}


class GeminiLike:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def chat(self, request: Request) -> Response:
        raw = await request.body()
        self.bodies.append(raw)
        status, error = fake_gemini(orjson.loads(raw))
        return JSONResponse(ANSWER if status == 200 else error, status_code=status)


def tools(*schemas: tuple[str, dict]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": name, "parameters": copy.deepcopy(schema)}}
        for name, schema in schemas
    ]


def ask(base_url: str, declared: list[dict[str, Any]]) -> str | None:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    answer = client.chat.completions.create(
        model="gemini-2.5-flash",
        messages=[{"role": "user", "content": "edit a.txt"}],
        tools=declared,  # type: ignore[arg-type]
    )
    return answer.choices[0].message.content


def test_the_agents_tools_are_refused_direct_and_answered_through_the_proxy() -> None:
    server = GeminiLike()
    app = Starlette(routes=[Route("/v1/chat/completions", server.chat, methods=["POST"])])
    declared = tools(("edit", EDIT_TOOL), ("create_tasks", MCP_TOOL))
    with serve_in_thread(app) as upstream:
        with pytest.raises(openai.BadRequestError) as refused:
            ask(f"{upstream}/v1", declared)
        assert "Unknown name" in str(refused.value) or "Cannot find field" in str(refused.value)
        with running_proxy(f"{upstream}/v1", **{"upstream.schema_dialect": "gemini"}) as proxy:
            assert ask(f"{proxy}/v1", declared) == "Done."
    sent = orjson.loads(server.bodies[-1])
    assert fake_gemini(sent)[0] == 200
    assert "$schema" not in orjson.dumps(sent).decode()


def test_a_request_that_needs_nothing_reaches_gemini_byte_for_byte() -> None:
    server = GeminiLike()
    app = Starlette(routes=[Route("/v1/chat/completions", server.chat, methods=["POST"])])
    body = {
        "model": "gemini-2.5-flash",
        "messages": [{"role": "user", "content": "read a.txt"}],
        "tools": tools(("read", ALREADY_FINE)),
    }
    raw = orjson.dumps(body)
    gemini = {"upstream.schema_dialect": "gemini"}
    with serve_in_thread(app) as upstream, running_proxy(f"{upstream}/v1", **gemini) as proxy:
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            content=raw,
            headers={"content-type": "application/json", "authorization": "Bearer sk-t"},
        )
        assert response.status_code == 200
        assert response.headers["x-streamfix-repairs"] == "none"
    assert server.bodies == [raw]
