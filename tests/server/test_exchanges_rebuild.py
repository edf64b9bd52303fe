"""Exchanges.send adopts a refusal's rebuilt phase one only when it is what went up: a
rebuild that changes nothing leaves the exchange's own tally and Forwarded standing."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
from starlette.requests import Request

from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.server.app import create_app
from proxy.server.exchanges import Rebuilt
from proxy.settings.schema import Settings

GEMINI_NAMES = (
    "Invalid function name. Must start with a letter or an underscore. Must be alphameric "
    "(a-z, A-Z, 0-9), underscores (_), dots (.) or dashes (-), with a maximum length of 64."
)
BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "read", "parameters": {}}}],
}


def refusing_then_answering() -> tuple[httpx.MockTransport, list[bytes]]:
    sent: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        if len(sent) == 1:
            error = {"error": {"code": 400, "message": GEMINI_NAMES, "status": "INVALID_ARGUMENT"}}
            return httpx.Response(400, json=[error])
        return httpx.Response(200, json={"choices": []})

    return httpx.MockTransport(handler), sent


async def send_with(rebuilt_body: dict[str, Any]) -> tuple[Any, list[bytes], Tally]:
    transport, sent = refusing_then_answering()
    app = create_app(Settings().with_values({"upstream.base_url": "http://up.test/v1"}), transport)
    proxy = app.state.proxy
    exchanges = proxy.exchanges
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"authorization", b"Bearer sk-test")],
    }
    request = Request(scope)
    route = proxy.router.route_for("m")
    record = exchanges.record(request, "rid", BODY, route, time.monotonic())
    record.tally.count("first_phase_only", 1)  # what the exchange's own phase one counted
    forwarded, _ = await proxy.phases.request(dict(BODY), route.rules("m"), None, record.tally)
    record.forwarded = forwarded
    fresh = Tally("rid")

    async def rebuild(rules: RouteRules) -> Rebuilt:
        again, _ = await proxy.phases.request(dict(rebuilt_body), rules, None, fresh)
        return Rebuilt(again, fresh)

    content = orjson.dumps(forwarded.body)
    await exchanges.send(
        request, route, b"chat/completions", content, record, forwarded.body, rebuild
    )
    return record, sent, fresh


async def test_a_rebuild_that_changes_nothing_is_not_adopted() -> None:
    record, sent, fresh = await send_with(BODY)
    assert len(sent) == 1  # the refusal stands: nothing to send differently
    assert record.tally is not fresh
    assert record.tally.repairs.get("first_phase_only") == 1


async def test_a_rebuild_that_goes_up_is_adopted_with_what_was_learned() -> None:
    renamed = {
        **BODY,
        "tools": [{"type": "function", "function": {"name": "1x", "parameters": {}}}],
    }
    record, sent, fresh = await send_with(renamed)
    assert len(sent) == 2
    assert record.tally is fresh
    assert "first_phase_only" not in record.tally.repairs
    assert record.tally.repairs.get("tool_names_learned") == 1
