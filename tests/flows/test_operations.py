"""The proxy run like infrastructure: `python -m proxy serve` as a real process, signals and all.

- Shutdown: SIGTERM stops accepting (new connections are refused), lets an open stream finish
  within `server.shutdown_grace_seconds`, then cuts what is still open and exits.
- Workers: `--workers 2` refuses the per-process memory store; with Redis, a signature captured
  through one worker is injected by the other (each worker is frozen in turn with SIGSTOP, so
  the follow-ups provably land on the other one).
- `--log-format json`: one JSON line per exchange, the request id taken from the client or
  generated, sent upstream and returned, and the client's credential never written.
- `streamfix config`: the effective configuration with its secrets masked; bad values exit 2.

Every process is started with bounded waits and terminated (then killed) in a `finally`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.repair.conformance import violations
from tests.support.fake_upstream import FakeUpstream, load_transcript, running_fake_upstream
from tests.support.proxy_process import (
    LOG_TIMEOUT,
    chat,
    run_cli,
    serving,
    write_config,
)
from tests.support.redis_receipts import (
    SIGNATURE,
    first_request,
    follow_up_request,
    sent_call_signature,
    stream_through,
    wait_for_receipts,
)
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.servers import free_port
from tests.support.streams import assembled_calls, finish_reasons
from tests.support.waiting import wait_until

# Five events at 0.3 s apart: a stream of ~1.5 s. Indexless fragmented call ending in "stop":
# the client must get it repaired (index, whole arguments, "tool_calls").
SLOW_TRANSCRIPT = "gemini_indexless_fragmented_single"


# ── a proxy process ──────────────────────────────────────────────────────────


# ── streams ──────────────────────────────────────────────────────────────────


class StreamInThread:
    """A streamed chat read in a background thread; `first_bytes` is set when data arrives."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        self.first_bytes = threading.Event()
        self.chunks: list[bytes] = []
        self.error: Exception | None = None
        self.status: int | None = None
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(url, body), daemon=True)
        self._thread.start()

    def _run(self, url: str, body: dict[str, Any]) -> None:
        try:
            with httpx.stream(
                "POST", f"{url}/v1/chat/completions", json=body, timeout=20
            ) as response:
                self.status = response.status_code
                for chunk in response.iter_raw():
                    self.chunks.append(chunk)
                    self.first_bytes.set()
        except Exception as exc:
            self.error = exc
        finally:
            self.ended_at = time.monotonic()
            self.first_bytes.set()

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the stream is still open after {timeout}s"


def assert_repaired_transcript(body: bytes, name: str) -> None:
    """The whole repaired stream: the transcript's expected calls, one finish, `[DONE]`."""
    assert body.endswith(b"data: [DONE]\n\n"), body[-300:]
    assert b'"error"' not in body, body
    assert violations(body) == []
    expected = load_transcript(name).meta["expect"]["choices"][0]
    assert finish_reasons(body) == {0: [expected["finish_reason"]]}
    calls = assembled_calls(body)[0]
    assert [(c["id"], c["name"]) for c in calls] == [
        (c["id"], c["name"]) for c in expected["tool_calls"]
    ]
    for call, want in zip(calls, expected["tool_calls"], strict=True):
        assert json.loads(call["arguments"]) == want["arguments"]
        assert call["extra_content"]["google"]["thought_signature"] == want["thought_signature"]


def assert_connection_refused(send: Callable[[], object]) -> None:
    """uvicorn closes its listening socket on SIGTERM: a new connection gets ECONNREFUSED."""
    with pytest.raises(httpx.ConnectError) as caught:
        send()
    # httpx wraps httpcore's ConnectError, which carries the OSError as its argument.
    seen: list[BaseException] = []
    pending: list[object] = [caught.value]
    while pending:
        item = pending.pop()
        if isinstance(item, BaseException) and item not in seen:
            seen.append(item)
            pending += [item.__cause__, item.__context__, *item.args]
    assert any(isinstance(e, ConnectionRefusedError) for e in seen), repr(caught.value)


# ── graceful shutdown ────────────────────────────────────────────────────────


@pytest.fixture
def slow_upstream() -> Iterator[tuple[FakeUpstream, str]]:
    with running_fake_upstream(delay=0.3) as (fake, root):
        yield fake, f"{root}/v1"


def test_sigterm_lets_an_open_stream_finish_and_refuses_new_connections(
    tmp_path: Path, slow_upstream: tuple[FakeUpstream, str]
) -> None:
    fake, upstream = slow_upstream
    grace = 5.0
    config = write_config(tmp_path, f"[server]\nshutdown_grace_seconds = {grace}\n")
    with serving("--config", config, "--upstream", upstream) as proxy:
        # A client that has already talked to the proxy over a kept-alive connection.
        with httpx.Client(base_url=proxy.url, timeout=5) as keep_alive:
            assert keep_alive.get("/healthz").status_code == 200

            stream = StreamInThread(proxy.url, chat(SLOW_TRANSCRIPT))
            assert stream.first_bytes.wait(5) and stream.chunks, stream.error
            sigterm_at = time.monotonic()
            proxy.process.send_signal(signal.SIGTERM)
            proxy.wait_for_log("Shutting down")

            # During the grace period: the stream is still open, the process still runs,
            # and new requests are refused at the TCP level (uvicorn closed its listening
            # socket), on a fresh connection as on the client's kept-alive one.
            assert stream.running and proxy.process.poll() is None
            assert_connection_refused(
                lambda: httpx.post(
                    f"{proxy.url}/v1/chat/completions", json=chat(SLOW_TRANSCRIPT), timeout=5
                )
            )
            assert_connection_refused(lambda: keep_alive.get("/healthz"))
            assert stream.running, "the refusals must have happened while the stream was open"

            stream.join(timeout=grace + 5)
        code = proxy.wait_exit(timeout=grace + 5)
        exited_after = time.monotonic() - sigterm_at

    assert stream.error is None, repr(stream.error)
    assert stream.status == 200
    assert_repaired_transcript(stream.body, SLOW_TRANSCRIPT)
    assert len(fake.requests) == 1  # the refused request never reached the upstream
    assert exited_after < grace, f"exited {exited_after:.2f}s after SIGTERM"
    # uvicorn shuts down gracefully (the app's lifespan ran to its end), then re-raises the
    # SIGTERM it caught with the default handler, so the status is "killed by SIGTERM" (143
    # in a shell), not 0. Under a PID-1 container init the re-raised signal is ignored.
    assert code == -signal.SIGTERM, proxy.stderr
    assert "Application shutdown complete." in proxy.stderr
    assert "timeout graceful shutdown exceeded" not in proxy.stderr


def test_stream_still_open_after_a_short_grace_is_cut_and_the_process_exits(
    tmp_path: Path,
) -> None:
    grace = 1.0
    config = write_config(tmp_path, f"[server]\nshutdown_grace_seconds = {grace}\n")
    # Five events one second apart: the stream needs ~5 s, far longer than the grace.
    with running_fake_upstream(delay=1.0) as (fake, root):
        with serving("--config", config, "--upstream", f"{root}/v1") as proxy:
            stream = StreamInThread(proxy.url, chat(SLOW_TRANSCRIPT))
            assert stream.first_bytes.wait(5) and stream.chunks, stream.error
            sigterm_at = time.monotonic()
            proxy.process.send_signal(signal.SIGTERM)
            stream.join(timeout=grace + 5)
            code = proxy.wait_exit(timeout=grace + 5)
            exited_after = time.monotonic() - sigterm_at
            assert stream.ended_at is not None
            cut_after = stream.ended_at - sigterm_at
        # The proxy's upstream connection went with it.
        wait_until(
            lambda: fake.open_streams == 0, "the upstream stream to close", LOG_TIMEOUT, 0.02
        )

    # Cut, visibly: the chunked body never ends, and nothing pretends the answer is complete.
    assert isinstance(stream.error, httpx.RemoteProtocolError), repr(stream.error)
    assert b"[DONE]" not in stream.body
    assert b'"finish_reason":"tool_calls"' not in stream.body
    assert grace <= cut_after < grace + 1.5, f"cut {cut_after:.2f}s after SIGTERM"
    assert exited_after < grace + 1.5, f"exited {exited_after:.2f}s after SIGTERM"
    assert code == -signal.SIGTERM, proxy.stderr
    assert "timeout graceful shutdown exceeded" in proxy.stderr


# ── workers ──────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--workers", "2"], {}), ([], {"STREAMFIX_WORKERS": "2"})],
    ids=["flag", "environment"],
)
def test_several_workers_refuse_the_memory_store(args: list[str], env: dict[str, str]) -> None:
    port = str(free_port())
    code, stdout, stderr = run_cli("serve", "--port", port, *args, env=env)
    assert code == 2, stderr
    assert stdout == ""
    assert "receipts.store" in stderr and "redis://" in stderr.lower(), stderr
    assert "Traceback" not in stderr


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


def worker_pids(parent: int) -> list[int]:
    """uvicorn's worker processes: the parent's `multiprocessing.spawn` children."""
    children: list[int] = []
    for task in os.listdir(f"/proc/{parent}/task"):
        children += [
            int(pid) for pid in Path(f"/proc/{parent}/task/{task}/children").read_text().split()
        ]
    return [pid for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def exchanges_served(url: str) -> float:
    """streamfix_requests_total summed over its labels, as the worker answering reports it."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("streamfix_requests_total{")
    )


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """SIGSTOP a process for the block: it cannot accept, so its siblings take every request."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_two_workers_share_signatures_through_redis(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    config = write_config(tmp_path, f'[signatures]\nstore = "{redis_server.url}"\n')
    with running_fake_upstream() as (fake, root):
        upstream = f"{root}/v1beta/openai"  # Gemini's shape; the model names say "gemini"
        with serving("--workers", "2", "--config", config, "--upstream", upstream) as proxy:
            proxy.wait_for_log("Application startup complete.", count=2)
            workers = worker_pids(proxy.pid)
            assert len(workers) == 2, (workers, proxy.stderr)

            for _ in range(3):
                assert httpx.get(f"{proxy.url}/healthz", timeout=5).json() == {"status": "ok"}
                assert SIGNATURE.encode() in stream_through(proxy.url, first_request())
            wait_for_receipts(redis_server)

            # Whichever worker captured it, each worker in turn serves follow-ups alone. Each
            # worker has its own /metrics registry: the count read before and after moving by
            # exactly 3 shows the follow-ups and the /metrics reads all hit the same worker.
            for worker in workers:
                with frozen(worker):
                    before = exchanges_served(proxy.url)
                    for _ in range(3):
                        stream_through(proxy.url, follow_up_request())
                        assert sent_call_signature(fake) == SIGNATURE
                    assert exchanges_served(proxy.url) == before + 3
            assert httpx.get(f"{proxy.url}/readyz", timeout=5).json()["store"] is True

            proxy.process.send_signal(signal.SIGTERM)
            # uvicorn's multiprocess supervisor exits normally (unlike a single worker).
            assert proxy.wait_exit() == 0, proxy.stderr
    assert all(not Path(f"/proc/{pid}").exists() for pid in workers)


# ── logs ─────────────────────────────────────────────────────────────────────

CLIENT_SECRET = "sk-streamfix-never-logged-6b1f0c"


def test_json_logs_one_line_per_exchange_with_the_request_id(
    fake_upstream: tuple[FakeUpstream, str],
) -> None:
    fake, root = fake_upstream
    auth = {"authorization": f"Bearer {CLIENT_SECRET}"}
    args = ("--log-format", "json", "--log-level", "debug", "--upstream", f"{root}/v1")
    with serving(*args) as proxy:
        chat_url = f"{proxy.url}/v1/chat/completions"
        # 1. The client names the request: that id is sent upstream and returned.
        streamed = httpx.post(
            chat_url,
            json=chat("gemini_indexless_call_stop"),
            headers={**auth, "x-request-id": "client-chosen-id-42"},
            timeout=10,
        )
        assert streamed.status_code == 200
        assert streamed.headers["x-request-id"] == "client-chosen-id-42"  # not the upstream's
        assert fake.requests[-1].headers["x-request-id"] == "client-chosen-id-42"
        # 2. It does not: the proxy generates one, sends it upstream and returns it.
        plain = httpx.post(
            chat_url,
            json=chat("gemini_indexless_call_stop", stream=False),
            headers=auth,
            timeout=10,
        )
        assert plain.status_code == 200
        generated = plain.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated), generated
        assert fake.requests[-1].headers["x-request-id"] == generated
        # 3. An upstream error is an exchange too.
        limited = httpx.post(
            chat_url, json={**chat("openai_no_done"), "model": "error_openai_429"}, headers=auth
        )
        assert limited.status_code == 429
        failed = limited.headers["x-request-id"]
        assert fake.requests[-1].headers["x-request-id"] == failed != generated

        proxy.wait_for(
            lambda: proxy.stderr.count('"request_id"') >= 3, "three exchange lines", LOG_TIMEOUT
        )
    # Stopped: every line it will ever write is in.

    lines = [json.loads(line) for line in proxy.stderr_lines()]  # every line is JSON
    assert all(isinstance(line, dict) and "message" in line for line in lines)
    exchanges = [line for line in lines if "request_id" in line]
    by_id = {line["request_id"]: line for line in exchanges}
    assert len(exchanges) == len(by_id) == 3, exchanges
    expected = {
        "client-chosen-id-42": ("gemini_indexless_call_stop", 200),
        generated: ("gemini_indexless_call_stop", 200),
        failed: ("error_openai_429", 429),
    }
    assert set(by_id) == set(expected)
    for request_id, (model, status) in expected.items():
        line = by_id[request_id]
        assert line["route"] == "default"
        assert line["model"] == model
        assert line["status"] == status
        assert isinstance(line["duration_s"], float) and line["duration_s"] >= 0
        assert isinstance(line["repairs"], dict)
        assert all(isinstance(n, int) for n in line["repairs"].values())
    # The streamed Gemini call was repaired and its signature captured.
    assert by_id["client-chosen-id-42"]["repairs"].get("signatures_captured") == 1

    assert fake.requests[-1].headers["authorization"] == f"Bearer {CLIENT_SECRET}"
    assert CLIENT_SECRET not in proxy.output


# ── streamfix config ─────────────────────────────────────────────────────────

REDIS_PASSWORD = "redis-pass-never-printed-41c9"
UPSTREAM_KEY = "upstream-key-never-printed-93aa"
PROXY_KEYS = "proxy-key-never-printed-1,proxy-key-never-printed-2"


def test_config_prints_the_effective_configuration_with_secrets_masked(tmp_path: Path) -> None:
    store = "redis://:" + REDIS_PASSWORD + "@127.0.0.1:6390/2"
    config = write_config(
        tmp_path,
        f'[signatures]\nstore = "{store}"\n\n'
        '[upstream]\napi_key_env = "STREAMFIX_TEST_UPSTREAM_KEY"\n\n'
        '[[routes]]\nname = "local"\nmodels = ["qwen*"]\n'
        'base_url = "http://127.0.0.1:8000/v1"\napi_key_env = "STREAMFIX_TEST_UPSTREAM_KEY"\n',
    )
    env = {
        "STREAMFIX_TEST_UPSTREAM_KEY": UPSTREAM_KEY,
        "STREAMFIX_API_KEYS": PROXY_KEYS,
        "STREAMFIX_PORT": "9191",
    }
    code, stdout, stderr = run_cli(
        "config", "--json", "--config", config, "--workers", "3", env=env
    )
    assert code == 0, stderr
    for secret in (REDIS_PASSWORD, UPSTREAM_KEY, *PROXY_KEYS.split(",")):
        assert secret not in stdout + stderr
    document = json.loads(stdout)
    # Effective: file, environment and flags all applied.
    assert document["server"]["port"] == 9191
    assert document["server"]["workers"] == 3
    assert document["receipts"]["store"] == "redis://****@127.0.0.1:6390/2"
    assert document["upstream"]["api_key"] == "**** (from $STREAMFIX_TEST_UPSTREAM_KEY)"
    assert document["routes"][0]["api_key"] == "**** (from $STREAMFIX_TEST_UPSTREAM_KEY)"
    assert document["proxy_api_keys"] == "2 key(s) from $STREAMFIX_API_KEYS"


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"STREAMFIX_PORT": "0"}, "server.port"),
        ({"STREAMFIX_WORKERS": "two"}, "server.workers"),
        ({"STREAMFIX_LOG_FORMAT": "xml"}, "server.log_format"),
    ],
)
def test_config_with_an_invalid_value_exits_2_naming_the_key(env: dict[str, str], key: str) -> None:
    code, stdout, stderr = run_cli("config", env=env)
    assert code == 2
    assert stdout == ""
    assert stderr.startswith("streamfix: invalid configuration: ") and key in stderr, stderr
    assert "Traceback" not in stderr
