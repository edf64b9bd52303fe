"""Signatures never cross tenants, over real sockets: two clients the upstream cannot tell apart
(one upstream key, the clients told apart only by their own credential to the proxy) never get
each other's thought signatures, streamed or not.

Every server is on 127.0.0.1. Each test says in a comment what would break without the
behaviour it checks.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.gemini_upstream import (
    TWO_STEPS,
    running_gemini_upstream,
    signature_of,
    tool_calls_of,
)
from tests.support.proxies import running_proxy
from tests.support.streams import assembled_calls
from tests.support.tenant_flow import MODEL, TOOLS

TIMEOUT = httpx.Timeout(10.0)

UPSTREAM_KEY = "sk-test-UPSTREAM-7d41c0ffee93"


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


def first_call(response: httpx.Response, stream: bool) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    if stream:
        (call, *_) = assembled_calls(response.content)[0]
        return {"id": call["id"], "name": call["name"], "arguments": call["arguments"]}
    (call, *_) = response.json()["choices"][0]["message"]["tool_calls"]
    function = call["function"]
    return {"id": call["id"], "name": function["name"], "arguments": function["arguments"]}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("credential", ["x-api-key", "proxy-keys"])
def test_tenants_the_upstream_cannot_tell_apart_never_share_signatures(
    credential: str, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tests/flows/test_signature_flows.py covers tenants by Authorization and by tenant header,
    # where the upstream sees two credentials. Here it sees one: clients that authenticate with
    # `x-api-key`, or with the proxy's own keys in front of a route key (the upstream then sees
    # the route key for everybody), get the same call id. Without the tenant in the store key
    # (or with a tenant taken from Authorization only), the second client's signature would be
    # injected into the first client's follow-up; the fake cannot reject it (same credential),
    # so the test compares the signatures itself.
    config: dict[str, Any] = {}
    if credential == "x-api-key":
        clients = {"one": {"x-api-key": "sk-test-one"}, "two": {"x-api-key": "sk-test-two"}}
    else:
        monkeypatch.setenv("STREAMFIX_TEST_ROUTE_KEY", UPSTREAM_KEY)
        monkeypatch.setenv("STREAMFIX_API_KEYS", "sfx-test-one,sfx-test-two")
        config["upstream.api_key_env"] = "STREAMFIX_TEST_ROUTE_KEY"
        clients = {
            "one": {"authorization": "Bearer sfx-test-one"},
            "two": {"authorization": "Bearer sfx-test-two"},
        }

    def ids(step: int, position: int) -> str:
        return f"shared-{step}-{position}"

    with (
        running_gemini_upstream(TWO_STEPS, fixed_ids=ids) as (fake, root),
        running_proxy(f"{root}/v1beta/openai", **{"upstream.profile": "gemini", **config}) as proxy,
    ):
        url = f"{proxy}/v1/chat/completions"
        issued: dict[str, str] = {}
        histories: dict[str, list[dict[str, Any]]] = {}
        for name, headers in clients.items():
            messages: list[dict[str, Any]] = [{"role": "user", "content": "read a.txt"}]
            body = {"model": MODEL, "messages": messages, "tools": TOOLS, "stream": stream}
            call = first_call(httpx.post(url, json=body, headers=headers, timeout=TIMEOUT), stream)
            assert call["id"] == "shared-0-0"
            issued[name] = fake.issued_log[-1].signature
            # The client drops the signature, as most do.
            histories[name] = [
                *messages,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": call["arguments"]},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call["id"], "content": "hello"},
            ]
        tenants = {r.headers.get("authorization", "") for r in fake.requests}
        assert len(tenants) == 1  # the upstream cannot tell the clients apart
        assert issued["one"] != issued["two"]
        for name, headers in clients.items():
            body = {"model": MODEL, "messages": histories[name], "tools": TOOLS}
            response = httpx.post(url, json=body, headers=headers, timeout=TIMEOUT)
            assert response.status_code == 200, response.text
            sent = fake.requests[-1].json
            (step,) = [m for m in sent["messages"] if tool_calls_of(m)]
            assert signature_of(tool_calls_of(step)[0]) == issued[name], name
