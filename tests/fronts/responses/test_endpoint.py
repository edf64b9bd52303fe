"""`POST /v1/responses` in the app, against a scripted in-process chat upstream: refusals,
upstream errors before and after the first byte, a stream cut mid-call, keepalives, a store
write failing, and the routes the bridge does not offer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.fronts.responses.events_support import USAGE, call, delta
from tests.fronts.responses.test_events import check_invariants

KEY = {"authorization": "Bearer sk-a"}
BODY = {"model": "m", "input": "hi", "stream": True}


def sse(*chunks: dict[str, Any], done: bool = True) -> list[bytes]:
    out = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks]
    return [*out, b"data: [DONE]\n\n"] if done else out


Upstream = Callable[[httpx.Request], httpx.Response]


def streamed(parts: list[bytes], fail: Exception | None = None, pause: float = 0) -> Upstream:
    def handler(request: httpx.Request) -> httpx.Response:
        async def body() -> AsyncIterator[bytes]:
            for part in parts:
                if pause:
                    await asyncio.sleep(pause)
                yield part
            if fail is not None:
                raise fail

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    return handler


def post(
    upstream: Upstream, body: dict[str, Any], keepalive: float = 15.0, **headers: str
) -> tuple[httpx.Response, Any]:
    settings = Settings().with_values(
        {
            "upstream.base_url": "http://up.test/v1",
            "repairs.strict": True,
            "server.keepalive_seconds": keepalive,
        }
    )
    app = create_app(settings, transport=httpx.MockTransport(upstream))

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            return await client.post("/v1/responses", json=body, headers={**KEY, **headers})

    return asyncio.run(run()), app


def events_of(response: httpx.Response) -> list[dict[str, Any]]:
    return [
        orjson.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]


def test_a_stream_answers_events_and_names_the_repairs() -> None:
    response, _ = post(streamed(sse(delta(content="hi"), delta(finish="stop", usage=USAGE))), BODY)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "x-streamfix-repairs" in response.headers
    events = events_of(response)
    check_invariants(events)
    assert events[-1]["type"] == "response.completed"


def test_a_non_streamed_request_gets_the_response_object() -> None:
    def upstream(request: httpx.Request) -> httpx.Response:
        assert "stream" not in orjson.loads(request.content)
        return httpx.Response(
            200,
            json={
                "id": "c",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "hello"},
                    }
                ],
                "usage": USAGE,
            },
        )

    response, _ = post(upstream, {"model": "m", "input": "hi"})
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["output"][0]["content"][0]["text"] == "hello"


@pytest.mark.parametrize("status", [400, 401, 429, 500])
def test_an_upstream_refusal_before_the_first_byte_is_its_status_never_a_stream(
    status: int,
) -> None:
    error = {"error": {"message": "nope", "type": "invalid_request_error", "code": "bad"}}
    response, _ = post(lambda request: httpx.Response(status, json=error), BODY)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": {"message": "nope", "type": "invalid_request_error", "param": None, "code": "bad"}
    }


def test_geminis_listed_error_and_a_text_error_keep_their_status() -> None:
    gemini = [{"error": {"code": 400, "message": "bad sig", "status": "INVALID_ARGUMENT"}}]
    response, _ = post(lambda request: httpx.Response(400, json=gemini), BODY)
    assert (response.status_code, response.json()["error"]["message"]) == (400, "bad sig")
    response, _ = post(lambda request: httpx.Response(503, text="overloaded"), BODY)
    assert (response.status_code, response.json()["error"]["message"]) == (503, "overloaded")


def test_an_upstream_error_event_after_the_first_byte_is_response_failed() -> None:
    parts = sse(
        delta(content="par"), {"error": {"message": "boom", "code": "overloaded"}}, done=False
    )
    response, _ = post(streamed(parts), BODY)
    events = events_of(response)
    check_invariants(events)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {"code": "overloaded", "message": "boom"}


def test_a_stream_cut_mid_call_is_response_failed() -> None:
    parts = sse(delta(tool_calls=[call(0, "call_1", "f", '{"a":')]), done=False)
    response, _ = post(streamed(parts, fail=httpx.ReadError("cut")), BODY)
    events = events_of(response)
    check_invariants(events)
    assert events[-1]["type"] == "response.failed"
    assert not any(e["type"] == "response.output_item.done" for e in events)


def test_keepalives_while_the_upstream_is_silent() -> None:
    parts = sse(delta(content="late"), delta(finish="stop"))
    response, _ = post(streamed(parts, pause=0.3), BODY, keepalive=0.05)
    events = events_of(response)
    check_invariants(events)
    kinds = [e["type"] for e in events]
    assert kinds.count("response.in_progress") > 2
    assert kinds[-1] == "response.completed"


def test_a_failed_store_write_is_counted_and_the_answer_still_completes(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(items: dict[str, Any]) -> bool:
        return False

    from proxy.store.memory_store import MemoryStore

    monkeypatch.setattr(MemoryStore, "put_many", lambda self, items: failing(items))
    with caplog.at_level(logging.WARNING):
        response, _ = post(streamed(sse(delta(content="hi"), delta(finish="stop"))), BODY)
    assert events_of(response)[-1]["type"] == "response.completed"
    assert "responses_store_failed" in caplog.text


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"background": True}, "background"),
        ({"conversation": "c"}, "conversation"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
    ],
)
def test_refused_parameters_never_go_upstream(extra: dict[str, Any], param: str) -> None:
    def upstream(request: httpx.Request) -> httpx.Response:
        raise AssertionError("sent upstream")

    response, _ = post(upstream, {**BODY, **extra})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_parameter"
    assert response.json()["error"]["param"] == param


def test_an_unknown_previous_response_is_a_400() -> None:
    response, _ = post(streamed([]), {**BODY, "previous_response_id": "resp_nope"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "previous_response_not_found"


def test_the_request_is_translated_for_the_upstream() -> None:
    seen: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        assert request.url.path == "/v1/chat/completions"
        return streamed(sse(delta(finish="stop")))(request)

    post(upstream, {**BODY, "instructions": "be brief", "max_output_tokens": 5})
    assert seen[0]["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert seen[0]["max_tokens"] == 5


@pytest.mark.parametrize("path", ["/v1/responses/resp_1", "/v1/responses/resp_1/input_items"])
def test_what_the_bridge_does_not_offer_is_a_501(path: str) -> None:
    settings = Settings().with_values({"upstream.base_url": "http://up.test/v1"})
    app = create_app(settings, transport=httpx.MockTransport(lambda r: httpx.Response(500)))

    async def run() -> httpx.Response:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://proxy"
        ) as client:
            return await client.get(path)

    response = asyncio.run(run())
    assert response.status_code == 501
    assert response.json()["error"]["code"] == "not_implemented"


def test_an_upstream_answering_a_streamed_request_whole_still_gives_events() -> None:
    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "id": "c",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "whole"},
                    }
                ],
            },
        )

    response, _ = post(upstream, BODY)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = events_of(response)
    check_invariants(events)
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "whole"


def test_a_client_leaving_during_keepalives_closes_cleanly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream read pending in its own task is ended before the stream is closed."""
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from tests.support.proxies import running_proxy
    from tests.support.servers import serve_in_thread
    from tests.support.waiting import wait_until

    async def silent(request: Any) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b"data: " + orjson.dumps(delta(content="hi")) + b"\n\n"
            await asyncio.sleep(30)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    upstream = Starlette(routes=[Route("/v1/chat/completions", silent, methods=["POST"])])
    with (
        caplog.at_level(logging.INFO),
        serve_in_thread(upstream) as root,
        running_proxy(f"{root}/v1", **{"server.keepalive_seconds": 0.05}) as proxy,
    ):
        with httpx.stream("POST", f"{proxy}/v1/responses", json=BODY, headers=KEY) as response:
            seen = 0
            for line in response.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 6:
                    break
        wait_until(lambda: "POST /v1/responses" in caplog.text, "the exchange logged", timeout=5)
    assert "already running" not in caplog.text
    assert "Traceback" not in caplog.text


def test_an_error_in_a_200_body_is_an_error_not_an_empty_answer() -> None:
    error = {"error": {"message": "quota", "code": "insufficient_quota"}}
    response, _ = post(lambda request: httpx.Response(200, json=error), {**BODY, "stream": False})
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "insufficient_quota"


def test_a_continuation_keeps_one_instructions_message() -> None:
    seen: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        return streamed(sse(delta(content="ok"), delta(finish="stop")))(request)

    settings = Settings().with_values({"upstream.base_url": "http://up.test/v1"})
    app = create_app(settings, transport=httpx.MockTransport(upstream))

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            first = await client.post(
                "/v1/responses", json={**BODY, "instructions": "I"}, headers=KEY
            )
            completed = events_of(first)[-1]["response"]
            await client.post(
                "/v1/responses",
                json={**BODY, "instructions": "J", "previous_response_id": completed["id"]},
                headers=KEY,
            )

    asyncio.run(run())
    assert [m["content"] for m in seen[1]["messages"]] == ["J", "hi", "ok", "hi"]
