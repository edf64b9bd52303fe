"""Hardening of tenancy, start-up and logs (issue 13, items 6 and 10 a-b), over real sockets.

- Every credential form the proxy forwards names the tenant (Authorization, x-api-key,
  x-goog-api-key, api-key, `?key=`); a request with no credential gets no receipts and leaves
  none; `signatures.tenant_header` only subdivides a credential's tenant.
- `STREAMFIX_API_KEYS` set to nothing but commas and blanks stops start-up.
- A control character in a client's value cannot forge a text log line.

Every server is on 127.0.0.1. Each test says what would break without the behaviour it checks.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from proxy.repair.tenancy import ReceiptScope, tenant_of
from proxy.server.app import Proxy
from proxy.server.auth import parse_keys
from proxy.server.logs import JsonFormatter, TextFormatter, configure_logging, escape_controls
from proxy.settings.schema import ConfigError, Settings
from tests.support.fake_upstream import running_fake_upstream
from tests.support.gemini_upstream import (
    DUMMY_SIGNATURE,
    TWO_STEPS,
    GeminiUpstream,
    running_gemini_upstream,
    signature_of,
    tool_calls_of,
)
from tests.support.proxies import running_proxy
from tests.support.servers import free_port
from tests.support.streams import assembled_calls
from tests.support.tenant_flow import MODEL, TOOLS  # the same two-tenant Gemini flow

TIMEOUT = httpx.Timeout(10.0)


# ── tenant_of ────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "form",
    [
        {"authorization": "Bearer K"},
        {"x-api-key": "K"},
        {"x-goog-api-key": "K"},
        {"api-key": "K"},
        {"query": "key=K"},
        {"query": "alt=sse&key=K"},
    ],
    ids=["authorization", "x-api-key", "x-goog-api-key", "api-key", "query", "query-among"],
)
def test_every_credential_form_names_a_tenant_of_its_own(form: dict[str, str]) -> None:
    # Without it (only Authorization and x-api-key counted) every x-goog-api-key, api-key and
    # `?key=` client was the one tenant "anonymous".
    headers = {k: v for k, v in form.items() if k != "query"}
    query = form.get("query", "")
    mine = tenant_of(headers, query=query)
    other = tenant_of(
        {k: v.replace("K", "L") for k, v in headers.items()}, query=query.replace("K", "L")
    )
    assert mine is not None and other is not None
    assert mine != other
    assert "K" not in mine and len(mine) == 32  # a hash, never the credential


def test_the_same_key_in_two_forms_is_two_tenants_and_all_forms_count() -> None:
    # Which form the upstream reads is its business; the proxy never merges two requests that
    # differ in any credential they carry.
    forms = [
        {"authorization": "Bearer K"},
        {"x-api-key": "K"},
        {"x-goog-api-key": "K"},
        {"api-key": "K"},
        {"x-api-key": "K", "api-key": "L"},
    ]
    tenants = {tenant_of(headers) for headers in forms}
    tenants.add(tenant_of({}, query=b"key=K"))
    assert len(tenants) == len(forms) + 1


def test_query_values_are_taken_as_sent() -> None:
    # Decoded, `%ff` and `%fe` would both be U+FFFD: two different keys, one tenant.
    assert tenant_of({}, query=b"key=a%ff") != tenant_of({}, query=b"key=a%fe")
    assert tenant_of({}, query="key=K") == tenant_of({}, query=b"key=K")


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({}, b""),
        ({"authorization": ""}, b""),
        ({"authorization": "Bearer "}, b""),
        ({"x-api-key": "  "}, b""),
        ({"content-type": "application/json"}, b"alt=sse&key="),
        ({"x-tenant": "alice"}, b""),  # a tenant header alone is no credential
    ],
)
def test_no_credential_is_no_tenant(headers: dict[str, str], query: bytes) -> None:
    # Without it, all such requests shared the tenant "anonymous", and its receipts.
    assert tenant_of(headers, "x-tenant", query=query) is None
    scope = ReceiptScope(None, "u")
    assert not scope.keeps_receipts
    with pytest.raises(ValueError, match="no store keys"):
        scope.key("call:x")


def test_the_tenant_header_subdivides_a_credential_and_never_replaces_it() -> None:
    # Before: the header alone was the tenant, so anyone sending `x-tenant: alice` with any key
    # (or none) reached alice's receipts.
    alice = tenant_of({"authorization": "Bearer shared", "x-tenant": "alice"}, "x-tenant")
    bob = tenant_of({"authorization": "Bearer shared", "x-tenant": "bob"}, "x-tenant")
    intruder = tenant_of({"authorization": "Bearer mine", "x-tenant": "alice"}, "x-tenant")
    plain = tenant_of({"authorization": "Bearer shared"}, "x-tenant")
    assert len({alice, bob, intruder, plain}) == 4
    assert tenant_of({"authorization": "Bearer shared", "x-tenant": "alice"}) == plain


# ── the same over the proxy, against an enforcing Gemini fake ────────────────


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
        kind = 'kind="receipts_skipped_no_credential"'
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


# ── STREAMFIX_API_KEYS ───────────────────────────────────────────────────────


@pytest.mark.parametrize("value", [" , ", "", ",", " ", ",,  ,"])
def test_proxy_keys_set_to_nothing_stop_start_up(value: str) -> None:
    # Before: parsed as no keys, which silently ran the proxy without authentication.
    with pytest.raises(ConfigError, match="STREAMFIX_API_KEYS: set but holds no key"):
        parse_keys(value)
    with pytest.raises(ConfigError, match="STREAMFIX_API_KEYS"):
        Proxy(Settings(), environ={"STREAMFIX_API_KEYS": value})


def test_proxy_keys_unset_or_given_parse_as_before() -> None:
    assert parse_keys(None) == ()
    assert parse_keys(" a, b ,,c ") == ("a", "b", "c")


def test_streamfix_serve_exits_2_on_blank_proxy_keys() -> None:
    # Before: `streamfix serve` started, and served with authentication off (then this run
    # would time out). The real command, on a free loopback port, so nothing of how it starts
    # its server is assumed.
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
    environ["STREAMFIX_API_KEYS"] = " , "
    command = [sys.executable, "-m", "proxy", "serve", "--host", "127.0.0.1"]
    command += ["--port", str(free_port()), "--upstream", "http://127.0.0.1:9/v1"]
    done = subprocess.run(
        command, env=environ, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "STREAMFIX_API_KEYS: set but holds no key" in done.stderr


# ── text logs ────────────────────────────────────────────────────────────────

FORGED_MODEL = (
    "m\n2026-01-01 INFO proxy.server.app forged\r\x1b[2K\x1b[1Aclean\x00\x7f\x9b\u2028end"
)


def installed_text_formatter() -> logging.Formatter:
    """The formatter `configure_logging` installs for text logs (the root's handlers are put
    back: pytest's capture lives there)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("info", "text")
        formatter = root.handlers[0].formatter
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert formatter is not None
    return formatter


def test_a_model_with_control_characters_cannot_forge_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Before: the exchange line printed the model as sent, so its newline started a line that
    # read as the proxy's own, and its escape sequences could rewrite the terminal.
    caplog.set_level(logging.INFO)
    with running_fake_upstream() as (_, root), running_proxy(f"{root}/v1") as proxy:
        body = {"model": FORGED_MODEL, "messages": [{"role": "user", "content": "hi"}]}
        httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=TIMEOUT)
    (record,) = [r for r in caplog.records if r.name == "proxy.server.app" and "route=" in r.msg]
    assert FORGED_MODEL in record.getMessage()  # the record itself is what was sent
    line = installed_text_formatter().format(record)
    assert len(line.splitlines()) == 1, line
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", line), repr(line)
    assert "model=m\\n2026-01-01 INFO proxy.server.app forged\\r\\x1b[2K\\x1b[1Aclean" in line
    assert "\\x00\\x7f\\x9b\\u2028end" in line
    json_line = JsonFormatter().format(record)
    assert len(json_line.splitlines()) == 1, repr(json_line)
    assert not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", json_line), repr(json_line)
    assert orjson.loads(json_line)["model"] == FORGED_MODEL  # escaped, not altered


def test_ordinary_lines_are_unchanged_and_tracebacks_keep_their_lines() -> None:
    plain = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    text = TextFormatter()
    record = logging.LogRecord(
        "proxy.server.app", logging.INFO, "f", 1, "[%s] route=%s é ✓", ("r", "x"), None
    )
    assert text.format(record) == plain.format(record)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failing = logging.LogRecord("p", logging.ERROR, "f", 1, "a\nb", (), sys.exc_info())
    lines = text.format(failing).splitlines()
    assert lines[0].endswith("a\\nb") and lines[1] == "Traceback (most recent call last):"
    assert escape_controls("tab\there") == "tab\\there"
