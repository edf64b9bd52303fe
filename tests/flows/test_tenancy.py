"""Tenants over the real proxy on 127.0.0.1, against an enforcing Gemini fake: clients keyed by
any credential form never get each other's signature, a request without credential gets and
leaves no receipts, and a tenant header cannot reach another credential's receipts.

Each test says what would break without the behaviour it checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.support.gemini_upstream import (
    DUMMY_SIGNATURE,
    TWO_STEPS,
    GeminiUpstream,
    running_gemini_upstream,
    signature_of,
    tool_calls_of,
)
from tests.support.proxies import running_proxy
from tests.support.streams import assembled_calls
from tests.support.tenant_flow import MODEL, TOOLS  # the same two-tenant Gemini flow

TIMEOUT = httpx.Timeout(10.0)


def shared_ids(step: int, position: int) -> str:
    """Both clients get the same call ids: only the tenant keeps their receipts apart."""
    return f"shared-{step}-{position}"


@contextmanager
def gemini_proxy(**config: Any) -> Iterator[tuple[GeminiUpstream, str]]:
    with (
        running_gemini_upstream(TWO_STEPS, fixed_ids=shared_ids) as (fake, root),
        running_proxy(f"{root}/v1beta/openai", **{"upstream.profile": "gemini", **config}) as proxy,
    ):
        yield fake, proxy


def call_of(response: httpx.Response, stream: bool) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    if stream:
        (call, *_) = assembled_calls(response.content)[0]
        return {"id": call["id"], "name": call["name"], "arguments": call["arguments"]}
    (call, *_) = response.json()["choices"][0]["message"]["tool_calls"]
    return {"id": call["id"], **call["function"]}


QUESTION = {"role": "user", "content": "read a.txt"}


def history_after(call: dict[str, Any]) -> list[dict[str, Any]]:
    """The client's history after one tool step, the signature dropped (as most clients do)."""
    function = {"name": call["name"], "arguments": call["arguments"]}
    return [
        QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call["id"], "type": "function", "function": function}],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": "hello"},
    ]


class Client:
    """One client of the proxy, with its credential in one form."""

    def __init__(self, proxy: str, form: str, key: str | None) -> None:
        self.url = f"{proxy}/v1/chat/completions"
        self.headers: dict[str, str] = {}
        if key is not None and form == "query":
            self.url += f"?key={key}"
        elif key is not None:
            self.headers[form] = f"Bearer {key}" if form == "authorization" else key

    def post(self, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(self.url, json=body, headers=self.headers, timeout=TIMEOUT)

    def first_step(self, stream: bool) -> dict[str, Any]:
        body = {"model": MODEL, "messages": [QUESTION], "tools": TOOLS}
        return call_of(self.post({**body, "stream": stream}), stream)

    def follow_up(self, fake: GeminiUpstream, call: dict[str, Any]) -> str | None:
        """Send the history after `call`; the signature the upstream got on it."""
        response = self.post({"model": MODEL, "messages": history_after(call), "tools": TOOLS})
        assert response.status_code == 200, response.text
        (step,) = [m for m in fake.requests[-1].json["messages"] if tool_calls_of(m)]
        return signature_of(tool_calls_of(step)[0])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("form", ["query", "x-goog-api-key", "api-key"])
def test_clients_keyed_by_any_form_never_get_each_others_signature(form: str, stream: bool) -> None:
    # Before: with the key in `?key=`, x-goog-api-key or api-key every client was the tenant
    # "anonymous", and client B's follow-up carried client A's thought signature. The Gemini
    # fake tells tenants apart by Authorization only, so it cannot reject that: the test
    # compares what the upstream received itself.
    with gemini_proxy() as (fake, proxy):
        alice, bob = Client(proxy, form, "sk-test-ALICE"), Client(proxy, form, "sk-test-BOB")
        call = alice.first_step(stream)
        signed_for_alice = fake.issued_log[-1].signature
        # Bob replays Alice's history (call ids are short and guessable): no signature of hers.
        assert bob.follow_up(fake, call) == DUMMY_SIGNATURE
        assert alice.follow_up(fake, call) == signed_for_alice  # hers are still kept for her
        # Bob's own step: the same call id, his own signature back, never hers.
        assert bob.first_step(stream)["id"] == call["id"]
        signed_for_bob = fake.issued_log[-1].signature
        assert bob.follow_up(fake, call) == signed_for_bob
        assert alice.follow_up(fake, call) == signed_for_alice
        assert fake.rejections == 0


def repairs_metric(proxy: str, name: str, label: str) -> float:
    text = httpx.get(f"{proxy}/metrics", timeout=TIMEOUT).text
    found = re.search(rf"^{name}\{{{label}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_request_without_credential_gets_and_leaves_no_receipts(stream: bool) -> None:
    # Before: keyless clients shared the tenant "anonymous": the second one's follow-up got
    # the first one's signature.
    with gemini_proxy() as (fake, proxy):
        first, second = Client(proxy, "none", None), Client(proxy, "none", None)
        call = first.first_step(stream)
        assert fake.issued_log[-1].signature
        assert second.follow_up(fake, call) == DUMMY_SIGNATURE  # nothing put back...
        assert first.follow_up(fake, call) == DUMMY_SIGNATURE  # ...to anyone: none was kept
        kind = 'kind="receipts_skipped_no_credential",route="default"'
        assert repairs_metric(proxy, "streamfix_repairs_total", kind) == 3  # once per exchange
        captured = repairs_metric(proxy, "streamfix_signatures_total", 'event="captured"')
        assert captured == 0
        # A client with a key, through the same proxy, still has its receipts kept.
        keyed = Client(proxy, "authorization", "sk-test-KEYED")
        call = keyed.first_step(stream)
        signed = fake.issued_log[-1].signature
        assert keyed.follow_up(fake, call) == signed


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_tenant_header_cannot_reach_another_credentials_receipts(stream: bool) -> None:
    # Before: the tenant header replaced the credential, so a client with its own key and the
    # header value of another got that other's signatures.
    with gemini_proxy(**{"signatures.tenant_header": "x-tenant"}) as (fake, proxy):
        victim = Client(proxy, "authorization", "sk-test-VICTIM")
        victim.headers["x-tenant"] = "alice"
        intruder = Client(proxy, "authorization", "sk-test-INTRUDER")
        intruder.headers["x-tenant"] = "alice"
        call = victim.first_step(stream)
        signed = fake.issued_log[-1].signature
        response = intruder.post({"model": MODEL, "messages": history_after(call), "tools": TOOLS})
        # The Gemini fake rejects a signature issued to another Authorization as corrupted.
        assert response.status_code == 200, response.text
        (step,) = [m for m in fake.requests[-1].json["messages"] if tool_calls_of(m)]
        assert signature_of(tool_calls_of(step)[0]) == DUMMY_SIGNATURE
        assert victim.follow_up(fake, call) == signed
