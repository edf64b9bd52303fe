"""No credential leaks, over real sockets: the upstream's key, the proxy's own keys and the client's
key (in a header or the query string) never reach the logs, the recordings, the metrics or an
error body.

Every server is on 127.0.0.1. Each test says in a comment what would break without the
behaviour it checks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from proxy.server.logs import JsonFormatter
from tests.support.chat_requests import chat
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.servers import free_port

TIMEOUT = httpx.Timeout(10.0)

UPSTREAM_KEY = "sk-test-UPSTREAM-7d41c0ffee93"
PROXY_KEY = "sfx-test-PROXY-52be11a0c3d8"
CLIENT_KEY = "sk-test-CLIENT-0b9e6a4f1d27"
QUERY_KEY = "sk-test-CLIENT-QUERY-83c5e2"
TEST_KEYS = (UPSTREAM_KEY, PROXY_KEY, CLIENT_KEY, QUERY_KEY)


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


def messages_request(model: str) -> dict[str, object]:
    """A streamed Messages request with a tool, as Claude Code sends one."""
    return {
        "model": model,
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
        "tools": [{"name": "read", "input_schema": {"type": "object"}}],
    }


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
                # The fronts' cassettes also keep the client's own request and its headers.
                "messages": httpx.post(
                    f"{proxy}/v1/messages",
                    json=messages_request("gemini_indexless_call_stop"),
                    headers={**other_credentials, **client_headers},
                    timeout=TIMEOUT,
                ),
                "responses": httpx.post(
                    f"{proxy}/v1/responses",
                    json={"model": "gemini_indexless_call_stop", "input": "go", "stream": True},
                    headers={**other_credentials, **client_headers},
                    timeout=TIMEOUT,
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
                "messages": 200,
                "responses": 200,
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
    assert len([k for k in corpus if k.startswith("recording ")]) >= 11  # the filters ran
    fronts = [c for c in corpus.values() if isinstance(c, bytes) and b'"client_request"' in c]
    assert len(fronts) == 2  # the client's own request was recorded, and filtered
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
            # A front's cassette keeps the client's query too: filtered the same way.
            "messages": httpx.post(
                f"{proxy}/v1/messages?beta=true&key={QUERY_KEY}",
                json=messages_request("gemini_indexless_call_stop"),
                timeout=TIMEOUT,
            ),
        }
        assert [r.status_code for r in responses.values()] == [200, 200, 200]
        assert any(QUERY_KEY in r.query for r in fake.requests)
    corpus: dict[str, str | bytes] = recorded_files(tmp_path)
    for name, response in responses.items():
        corpus |= exchange_corpus(name, response)
    assert len(corpus) >= 9
    assert any(b'"beta=true"' in c for c in corpus.values() if isinstance(c, bytes))
    corpus["logs"] = rendered(records, threads)
    assert leaks(corpus) == []
