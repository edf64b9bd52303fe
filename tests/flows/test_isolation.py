"""Isolation and secrets, over real sockets (issue 7, item 5): no credential in logs,
recordings, metrics or error bodies; signatures never cross tenants; the upstream is fixed by
configuration; store entries are size-capped.

Every server is on 127.0.0.1. `evil.example` is only ever a header value: the reserved
`.example` TLD does not resolve, and a proxy that tried would answer 502, which the tests catch.
Each test says in a comment what would break without the behaviour it checks.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.repair.receipts.store import MemoryStore
from proxy.server.app import create_app
from proxy.server.logs import JsonFormatter
from proxy.settings.schema import Settings
from tests.support.fake_upstream import running_fake_upstream
from tests.support.gemini_upstream import (
    TWO_STEPS,
    running_gemini_upstream,
    signature_of,
    tool_calls_of,
)
from tests.support.proxies import running_proxy
from tests.support.servers import free_port, serve_in_thread
from tests.support.streams import assembled_calls

TIMEOUT = httpx.Timeout(10.0)

UPSTREAM_KEY = "sk-test-UPSTREAM-7d41c0ffee93"
PROXY_KEY = "sfx-test-PROXY-52be11a0c3d8"
CLIENT_KEY = "sk-test-CLIENT-0b9e6a4f1d27"
QUERY_KEY = "sk-test-CLIENT-QUERY-83c5e2"
TEST_KEYS = (UPSTREAM_KEY, PROXY_KEY, CLIENT_KEY, QUERY_KEY)


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


# ── 1. no credential anywhere ────────────────────────────────────────────────


class Capture(logging.Handler):
    """Keeps every record; attached to uvicorn's loggers, which do not propagate to caplog."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def every_log_record(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """All records at DEBUG: the root logger's (proxy, httpx, httpcore) and uvicorn's."""
    caplog.set_level(logging.DEBUG)
    capture = Capture()
    names = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(capture)
    records: list[logging.LogRecord] = []
    try:
        yield records
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(capture)
            logger.setLevel(level)
        records += caplog.records + capture.records


def verbose_uvicorn() -> None:
    """uvicorn's Config resets its loggers' levels when a server starts: lower them after."""
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
        logging.getLogger(name).setLevel(logging.DEBUG)


def proxy_thread(proxy_url: str) -> str:
    """The name of the thread `tests.support.servers` runs the server at `proxy_url` in."""
    return f"uvicorn-{proxy_url.rsplit(':', 1)[1]}"


def rendered(records: list[logging.LogRecord], threads: set[str]) -> str:
    """The proxy's records (those from its server threads: the test's own client and the fake
    upstream, which does get the credentials, log in other threads), each as the text and the
    JSON log formats write it, plus its raw args."""
    text = logging.Formatter("%(name)s %(levelname)s %(message)s")
    lines = []
    mine = [r for r in records if r.threadName in threads]
    assert any(r.name == "proxy.server.app" for r in mine), (
        "none of the proxy's records were captured"
    )
    for record in mine:
        lines += [text.format(record), JsonFormatter().format(record), repr(record.args)]
    return "\n".join(lines)


def leaks(corpus: dict[str, str | bytes], keys: tuple[str, ...] = TEST_KEYS) -> list[str]:
    found = []
    for where, content in corpus.items():
        data = content.encode() if isinstance(content, str) else content
        found += [f"{key} in {where}" for key in keys if key.encode() in data]
    return found


def exchange_corpus(name: str, response: httpx.Response) -> dict[str, str | bytes]:
    headers = "\n".join(f"{k}: {v}" for k, v in response.headers.multi_items())
    return {f"{name} body": response.content, f"{name} headers": headers}


def recorded_files(directory: Path) -> dict[str, str | bytes]:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {f"recording {p.relative_to(directory)}": p.read_bytes() for p in files}


def test_no_credential_in_logs_recordings_metrics_or_error_bodies(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Without the credential filters this fails on: `safe_headers` (Authorization, x-api-key,
    # x-goog-api-key, api-key and Cookie in the cassettes' request headers), the 401 body
    # quoting the rejected key, or a log line printing request headers.
    monkeypatch.setenv("STREAMFIX_TEST_ROUTE_KEY", UPSTREAM_KEY)
    monkeypatch.delenv("STREAMFIX_API_KEYS", raising=False)
    corpus: dict[str, str | bytes] = {}
    client_headers = {
        "authorization": f"Bearer {CLIENT_KEY}",
        "cookie": f"session={CLIENT_KEY}",
        "proxy-authorization": f"Basic {CLIENT_KEY}",
    }
    other_credentials = {
        "x-api-key": CLIENT_KEY,
        "x-goog-api-key": CLIENT_KEY,
        "api-key": CLIENT_KEY,
    }
    with (
        every_log_record(caplog) as records,
        running_fake_upstream() as (fake, root),
    ):
        dead = f"http://127.0.0.1:{free_port()}/v1"
        # A: the client's own credential passes through to the upstream.
        passing = {
            "recording.record_dir": str(tmp_path / "passing"),
            "server.max_request_bytes": 4096,
            "routes": [{"name": "dead", "models": ["dead-*"], "base_url": dead}],
        }
        with running_proxy(f"{root}/v1", **passing) as proxy:
            threads = {proxy_thread(proxy)}
            verbose_uvicorn()
            url = f"{proxy}/v1/chat/completions"
            exchanges = {
                "stream": httpx.post(
                    url,
                    json=chat("gemini_indexless_call_stop", stream=True),
                    headers=client_headers,
                    timeout=TIMEOUT,
                ),
                "json": httpx.post(
                    url,
                    json=chat("gemini_indexless_call_stop"),
                    headers=other_credentials,
                    timeout=TIMEOUT,
                ),
                "upstream 401": httpx.post(
                    url,
                    json=chat("error_openai_401", stream=True),
                    headers=client_headers,
                    timeout=TIMEOUT,
                ),
                "upstream 429": httpx.post(
                    url,
                    json=chat("error_openai_429"),
                    headers=other_credentials,
                    timeout=TIMEOUT,
                ),
                "bad request": httpx.post(
                    url, content=b"{not json", headers=client_headers, timeout=TIMEOUT
                ),
                "too large": httpx.post(
                    url,
                    json=chat("x", padding="x" * 5000),
                    headers=client_headers,
                    timeout=TIMEOUT,
                ),
                "unreachable": httpx.post(
                    url,
                    json=chat("dead-1", stream=True),
                    headers=client_headers,
                    timeout=TIMEOUT,
                ),
                "models": httpx.get(
                    f"{proxy}/v1/models", headers=other_credentials, timeout=TIMEOUT
                ),
            }
            statuses = {name: r.status_code for name, r in exchanges.items()}
            assert statuses == {
                "stream": 200,
                "json": 200,
                "upstream 401": 401,
                "upstream 429": 429,
                "bad request": 400,
                "too large": 413,
                "unreachable": 502,
                "models": 200,
            }
            for name, response in exchanges.items():
                corpus |= exchange_corpus(f"passing {name}", response)
            corpus["passing /metrics"] = httpx.get(f"{proxy}/metrics").text
        # The upstream did get the client's key: the filters, not luck, keep it out.
        assert any(CLIENT_KEY in str(r.headers) for r in fake.requests)

        # B: a route key upstream, the proxy's own keys for the clients.
        monkeypatch.setenv("STREAMFIX_API_KEYS", f"sfx-test-other, {PROXY_KEY}")
        keyed = {
            "recording.record_dir": str(tmp_path / "keyed"),
            "routes": [
                {
                    "name": "paid",
                    "models": ["gemini_*", "error_*"],
                    "base_url": f"{root}/v1beta/openai",
                    "api_key_env": "STREAMFIX_TEST_ROUTE_KEY",
                }
            ],
        }
        with running_proxy(f"{root}/v1", **keyed) as proxy:
            threads.add(proxy_thread(proxy))
            verbose_uvicorn()
            url = f"{proxy}/v1/chat/completions"
            by_bearer = {"authorization": f"Bearer {PROXY_KEY}"}
            by_header = {"x-api-key": PROXY_KEY}
            exchanges = {
                "stream": httpx.post(
                    url,
                    json=chat("gemini_indexless_call_stop", stream=True),
                    headers=by_bearer,
                    timeout=TIMEOUT,
                ),
                "json": httpx.post(
                    url,
                    json=chat("gemini_indexless_call_stop"),
                    headers=by_header,
                    timeout=TIMEOUT,
                ),
                "upstream 401": httpx.post(
                    url, json=chat("error_openai_401"), headers=by_bearer, timeout=TIMEOUT
                ),
                "client key refused": httpx.post(
                    url,
                    json=chat("gemini_indexless_call_stop", stream=True),
                    headers=client_headers,
                    timeout=TIMEOUT,
                ),
                "client x-api-key refused": httpx.post(
                    url,
                    json=chat("gemini_indexless_call_stop"),
                    headers=other_credentials,
                    timeout=TIMEOUT,
                ),
                "bad request": httpx.post(url, content=b"[]", headers=by_bearer, timeout=TIMEOUT),
                "models": httpx.get(f"{proxy}/v1/models", headers=by_bearer, timeout=TIMEOUT),
            }
            statuses = {name: r.status_code for name, r in exchanges.items()}
            assert statuses == {
                "stream": 200,
                "json": 200,
                "upstream 401": 401,
                "client key refused": 401,
                "client x-api-key refused": 401,
                "bad request": 400,
                "models": 200,
            }
            for name, response in exchanges.items():
                corpus |= exchange_corpus(f"keyed {name}", response)
            corpus["keyed /metrics"] = httpx.get(f"{proxy}/metrics").text
        assert any(UPSTREAM_KEY in str(r.headers) for r in fake.requests)

    corpus |= recorded_files(tmp_path)
    assert len([k for k in corpus if k.startswith("recording ")]) >= 9  # the filters ran
    corpus["logs"] = rendered(records, threads)
    assert leaks(corpus) == []


def test_no_query_string_credential_in_logs_or_recordings(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    # Google's `?key=` is a credential (the cassettes drop it). Without a filter on every log
    # line that prints an upstream URL, it is written to the logs in clear: the proxy's httpx
    # client logs each request at INFO, the level `streamfix serve` runs at, as
    # `HTTP Request: GET http://…/models?key=… "HTTP/1.1 200 OK"`.
    with (
        every_log_record(caplog) as records,
        running_fake_upstream() as (fake, root),
        running_proxy(f"{root}/v1", **{"recording.record_dir": str(tmp_path)}) as proxy,
    ):
        threads = {proxy_thread(proxy)}
        verbose_uvicorn()
        responses = {
            "models": httpx.get(f"{proxy}/v1/models?key={QUERY_KEY}", timeout=TIMEOUT),
            "chat": httpx.post(
                f"{proxy}/v1/chat/completions?api_key={QUERY_KEY}&alt=sse",
                json=chat("gemini_indexless_call_stop", stream=True),
                timeout=TIMEOUT,
            ),
        }
        assert [r.status_code for r in responses.values()] == [200, 200]
        assert any(QUERY_KEY in r.query for r in fake.requests)
    corpus: dict[str, str | bytes] = recorded_files(tmp_path)
    for name, response in responses.items():
        corpus |= exchange_corpus(name, response)
    assert len(corpus) >= 6
    corpus["logs"] = rendered(records, threads)
    assert leaks(corpus) == []


# ── 2. signatures never cross tenants ────────────────────────────────────────

MODEL = "gemini-3-flash-preview"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


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


# ── 3. the upstream is fixed by configuration ────────────────────────────────


def raw_http(url: str, request: bytes) -> bytes:
    """Send `request` as-is to the server at `url`; the whole response (connection: close)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


REDIRECTING_HEADERS = [
    {"host": "evil.example"},
    {"host": "EVIL"},
    {"x-forwarded-host": "EVIL", "x-forwarded-proto": "http", "x-forwarded-port": "PORT"},
    {"x-forwarded-host": "evil.example", "x-forwarded-proto": "https"},
    {"forwarded": "for=192.0.2.1;host=EVIL;proto=http"},
    {"x-original-url": "http://EVIL/v1/models", "x-rewrite-url": "http://EVIL/v1/models"},
    {"x-forwarded-server": "EVIL", "x-host": "EVIL", "x-forwarded-prefix": "//EVIL/v1"},
]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/chat/completions", chat("gemini_indexless_call_stop", stream=True)),
        ("POST", "/v1/chat/completions", chat("gemini_indexless_call_stop")),
        ("GET", "/v1/models", None),
    ],
    ids=["stream", "json", "passthrough"],
)
def test_no_client_header_or_request_target_redirects_the_proxy(
    method: str, path: str, body: dict[str, Any] | None
) -> None:
    # Without a base URL fixed by configuration (a proxy that built the upstream URL from the
    # request's Host, X-Forwarded-*/Forwarded, or the absolute-form target), these requests
    # would reach the "evil" upstream (also a loopback fake, so a redirect is observable) or
    # fail resolving evil.example with a 502.
    with (
        running_fake_upstream() as (good, good_root),
        running_fake_upstream() as (evil, evil_root),
        running_proxy(f"{good_root}/v1") as proxy,
    ):
        evil_host = evil_root.removeprefix("http://")
        good_host = good_root.removeprefix("http://")
        content = orjson.dumps(body) if body is not None else b""
        for template in REDIRECTING_HEADERS:
            headers = {
                name: value.replace("EVIL", evil_host).replace("PORT", evil_host.split(":")[1])
                for name, value in template.items()
            }
            before = len(good.requests)
            response = httpx.request(
                method,
                f"{proxy}{path}",
                content=content or None,
                headers=headers,
                timeout=TIMEOUT,
            )
            assert response.status_code == 200, (headers, response.text)
            assert len(good.requests) == before + 1, headers
            assert good.requests[-1].path == path, headers
            assert good.requests[-1].headers["host"] == good_host, headers

        # The absolute form (RFC 9112 §3.2.2), as a forward proxy would be asked.
        request = (
            f"{method} http://{evil_host}{path} HTTP/1.1\r\n"
            f"host: {evil_host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(content)}\r\nconnection: close\r\n\r\n"
        ).encode() + content
        before = len(good.requests)
        answer = raw_http(proxy, request)
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert len(good.requests) == before + 1
        assert good.requests[-1].path == path
        assert good.requests[-1].headers["host"] == good_host
        assert evil.requests == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/%2E%2E/%2E%2E/v1/models",
        "/v1/..%2F..%2Fv1%2Fmodels",
        "/v1/%2e%2e%2f%2e%2e%2fv1%2fmodels",
        "/v1/models/..%2F..%2F..%2Fv1%2Fmodels",
    ],
)
def test_client_paths_stay_under_the_configured_base_path(path: str) -> None:
    # `/v1/{path}` is appended to the base URL; `..` segments, percent-encoded so the client's
    # own HTTP library sends them as they are, are decoded by the router and then resolved by
    # httpx, so the request leaves the base path for any path on that host (with a route's
    # own key, when the route holds one). Expected: refused (4xx), or sent under the base path.
    with (
        running_fake_upstream() as (fake, root),
        running_proxy(f"{root}/v1beta/openai") as proxy,
    ):
        response = httpx.get(f"{proxy}{path}", timeout=TIMEOUT)
        if fake.requests:
            assert fake.requests[-1].path.startswith("/v1beta/openai/"), fake.requests[-1].path
        else:
            assert 400 <= response.status_code < 500


# ── 4. store entries are size-capped ─────────────────────────────────────────

HOSTILE_MODEL = "gemini-hostile"  # a Google profile by name: the proxy keeps its receipts
SENTINEL_MODEL = "gemini-sentinel"  # answers one small, storable signature on call "sentinel"

Answer = Callable[[bool], Any]


class HostileUpstream:
    """A Google-looking upstream answering HOSTILE_MODEL with whatever `answer(stream)` builds
    (a list of chunk objects for a streamed request, a completion object otherwise), and
    SENTINEL_MODEL with one small signed call."""

    def __init__(self, answer: Answer) -> None:
        self.answers = {HOSTILE_MODEL: answer, SENTINEL_MODEL: answer_with_calls(SENTINEL)}
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        stream = bool(body.get("stream"))
        answer = self.answers[body["model"]](stream)
        if stream:
            events = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in answer)
            return Response(events + b"data: [DONE]\n\n", media_type="text/event-stream")
        return Response(orjson.dumps(answer), media_type="application/json")


def call_entry(call_id: str, signature: str, position: int = 0) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "read_file", "arguments": f'{{"path": "{position}.txt"}}'},
        "extra_content": {"google": {"thought_signature": signature}},
    }


SENTINEL = [call_entry("sentinel", "sig-sentinel")]


def answer_with_calls(calls: list[dict[str, Any]]) -> Answer:
    def answer(stream: bool) -> Any:
        if stream:
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [c]}}]}
                for c in calls
            ]
            finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            return [*chunks, finish]
        message = {"role": "assistant", "tool_calls": calls}
        return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}

    return answer


def answer_with_signed_text(signature: str) -> Answer:
    def answer(stream: bool) -> Any:
        extra = {"google": {"thought_signature": signature}}
        if stream:
            last = {"content": None, "extra_content": extra}
            return [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi."}}]},
                {"choices": [{"index": 0, "delta": last, "finish_reason": "stop"}]},
            ]
        message = {"role": "assistant", "content": "Hi.", "extra_content": extra}
        return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}

    return answer


class OnLoop:
    """ASGI wrapper that notes the proxy's event loop, so a test can read the store there,
    between two of the proxy's steps, never in the middle of a `put_many`."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)

    def run(self, fn: Callable[[], Any]) -> Any:
        assert self.loop is not None

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout=5)


@dataclass
class Stack:
    url: str
    store: MemoryStore
    on_loop: OnLoop

    # The memory store has no public way to list its entries or weigh each one: these read its
    # private map (key -> (expiry, compact JSON value as bytes, ...)), on the proxy's loop.

    def stored_keys(self) -> list[str]:
        return self.on_loop.run(lambda: list(self.store._entries))

    def sizes(self) -> list[int]:
        """UTF-8 bytes of each entry's key and value."""
        entries = self.store._entries
        return self.on_loop.run(lambda: [len(k.encode()) + len(e[1]) for k, e in entries.items()])

    def count(self) -> int:
        return self.on_loop.run(lambda: len(self.store))


@contextmanager
def proxy_in_front_of(answer: Answer, **values: Any) -> Iterator[Stack]:
    hostile = HostileUpstream(answer)
    with serve_in_thread(hostile.app) as root:
        settings = Settings().with_values(
            {"upstream.base_url": f"{root}/v1", "repairs.strict": True, **values}
        )
        app = create_app(settings)
        store = app.state.proxy.store
        assert isinstance(store, MemoryStore)
        on_loop = OnLoop(app)
        with serve_in_thread(on_loop) as proxy:
            yield Stack(f"{proxy}/v1/chat/completions", store, on_loop)


def exchange(url: str, model: str, stream: bool) -> httpx.Response:
    # With a credential: a request without one keeps no receipts at all.
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    response = httpx.post(url, json=chat(model, stream=stream), headers=headers, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response


def settle(stack: Stack, stream: bool) -> None:
    """Run a sentinel exchange and wait until its receipt is stored: receipts are written
    after the client has the answer (streamed: after `[DONE]`; non-streamed: in a background
    task), so this is how a test knows the exchanges before it have been written, or not."""
    exchange(stack.url, SENTINEL_MODEL, stream)
    deadline = time.monotonic() + 5
    while not any(key.endswith(":call:sentinel") for key in stack.stored_keys()):
        assert time.monotonic() < deadline, "the sentinel receipt was never stored"
        time.sleep(0.01)


BIG = "A" * (1024 * 1024)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    "answer",
    [answer_with_calls([call_entry("call-1", BIG)]), answer_with_signed_text(BIG)],
    ids=["call-signature", "text-signature"],
)
def test_a_one_megabyte_signature_is_not_stored(answer: Answer, stream: bool) -> None:
    # Without `signatures.max_value_bytes`, each such answer would put 1 MiB into the store:
    # at the default cap of 100,000 entries, 100 GiB.
    with proxy_in_front_of(answer, **{"signatures.max_value_bytes": 65_536}) as stack:
        response = exchange(stack.url, HOSTILE_MODEL, stream)
        assert BIG.encode() in response.content  # the client still gets it, untouched
        settle(stack, stream)
        assert [key.rsplit(":", 2)[-2:] for key in stack.stored_keys()] == [["call", "sentinel"]]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_one_megabyte_call_id_does_not_grow_the_store(stream: bool) -> None:
    # The cap weighs only the receipt; the store key carries the upstream's call id, whatever
    # its length. An upstream answering a 1 MiB id with a small signature puts a 1 MiB key
    # into the store per call (100 GiB at the default 100,000 entries). Expected: no entry
    # larger than `max_value_bytes` plus the key's fixed part, however that is achieved
    # (not stored, or keyed by a hash of the id).
    limit = 65_536
    answer = answer_with_calls([call_entry("c" * (1024 * 1024), "sig-small")])
    with proxy_in_front_of(answer, **{"signatures.max_value_bytes": limit}) as stack:
        exchange(stack.url, HOSTILE_MODEL, stream)
        settle(stack, stream)
        sizes = stack.sizes()
        assert all(size <= limit + 512 for size in sizes), sizes


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_flood_of_signatures_keeps_the_store_at_max_entries(stream: bool) -> None:
    # Without the LRU cap, 10,000 distinct signatures from one answer (and as many more from
    # every further answer) would all stay in memory until their TTL.
    max_entries = 50
    calls = [call_entry(f"flood-{i}", f"sig-{i:05d}", i) for i in range(10_000)]
    config = {"signatures.max_entries": max_entries}
    with proxy_in_front_of(answer_with_calls(calls), **config) as stack:
        for _ in range(2):
            exchange(stack.url, HOSTILE_MODEL, stream)
            settle(stack, stream)
            assert stack.count() == max_entries
        assert sum(stack.sizes()) < max_entries * 512
