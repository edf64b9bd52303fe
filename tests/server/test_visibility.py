"""What an operator sees of the proxy beside its repairs: the start-up line that says where
requests go (and a store that does not answer, said then), exchange log lines that tell a chat
from `/v1/models` and name the model even of a refused request, and the proxy's own logger
names on every line, uvicorn's included."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from proxy import __version__
from proxy.server.app import create_app
from proxy.server.logs import EXCHANGE
from proxy.settings.schema import Settings
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxy_process import serving
from tests.support.servers import free_port, serve_in_thread


def lifespan_log(
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    values: dict,
    env: dict | None = None,
) -> str:
    """The app's start-up and shutdown, as `streamfix serve` runs them, and what it logged."""
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    app = create_app(Settings().with_values(values))

    async def start_and_stop() -> None:
        async with app.router.lifespan_context(app):
            pass

    with caplog.at_level(logging.INFO, logger="proxy"):
        asyncio.run(start_and_stop())
    return "\n".join(r.getMessage() for r in caplog.records)


def test_the_start_up_line_says_where_requests_go(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {
        "server.port": 9123,
        "upstream.base_url": "https://user:secret@gateway.example/v1?key=AIza-secret",
        "routes": [
            {
                "name": "local",
                "models": ["qwen*"],
                "base_url": "http://127.0.0.1:8000/v1",
                "api_key_env": "LOCAL_KEY",
            }
        ],
        "recording.record_dir": "/tmp/streamfix-startup-cassettes",
    }
    env = {"LOCAL_KEY": "sk-local", "STREAMFIX_API_KEYS": "k1"}
    [line] = [
        line
        for line in lifespan_log(caplog, monkeypatch, values, env).splitlines()
        if line.startswith("streamfix ")
    ]
    assert line.startswith(f"streamfix {__version__} on http://127.0.0.1:9123: ")
    assert "local [qwen*] → 127.0.0.1:8000 (profile generic, own key)" in line
    assert "default → gateway.example (profile generic)" in line
    assert "store memory" in line
    assert "mode recording into /tmp/streamfix-startup-cassettes" in line
    assert "proxy keys on" in line and "upstream client http1" in line
    for secret in ("secret", "AIza", "sk-local", "k1"):
        assert secret not in line


def test_the_start_up_line_names_google_and_the_replay_mode(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    recordings = Path(__file__).resolve().parents[2] / "recordings"
    text = lifespan_log(caplog, monkeypatch, {"recording.replay_dir": str(recordings)})
    assert "default → generativelanguage.googleapis.com (profile gemini)" in text
    assert f"mode replaying {recordings}" in text and "proxy keys off" in text


def test_an_unreachable_redis_store_is_reported_at_start_up(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    text = lifespan_log(caplog, monkeypatch, {"receipts.store": store})
    assert "receipt store redis://****@127.0.0.1:" in text and "does not answer" in text
    assert "hunter2" not in text


@pytest.mark.parametrize(
    ("values", "env", "warned"),
    [
        ({}, {}, None),
        ({"server.replicas": 3}, {}, "server.replicas is 3 with the memory receipt store"),
        ({}, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, "running on Kubernetes with the memory"),
        ({"server.replicas": 3, "receipts.store": "redis://127.0.0.1:1/0"}, {}, None),
    ],
    ids=["one-replica", "declared-replicas", "kubernetes", "redis"],
)
def test_replicas_on_the_memory_store_are_warned_about_at_start_up(
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    values: dict,
    env: dict,
    warned: str | None,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    lifespan_log(caplog, monkeypatch, values, env)
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "misses its receipts" in r.getMessage()
    ]
    assert len(warnings) == (0 if warned is None else 1), warnings
    assert all(warning.startswith(warned or "") for warning in warnings), warnings


def exchange_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, EXCHANGE, None)]


def test_exchange_lines_tell_a_chat_from_the_model_list_and_name_a_refused_model(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        running_fake_upstream() as (_, root),
        serve_in_thread(
            create_app(Settings().with_values({"upstream.base_url": f"{root}/v1"}))
        ) as proxy,
        caplog.at_level(logging.INFO, logger="proxy.server.app"),
    ):
        assert httpx.get(f"{proxy}/v1/models").status_code == 200
        refused = httpx.post(
            f"{proxy}/v1/chat/completions", json={"model": "gpt-x", "messages": "not a list"}
        )
        assert refused.status_code == 400
        assert refused.headers["x-streamfix-repairs"] == "none"
        lines = exchange_lines(caplog)
    models, chat = (getattr(r, EXCHANGE) for r in lines[-2:])
    assert (models["method"], models["path"]) == ("GET", "/v1/models")
    assert (chat["method"], chat["path"], chat["model"]) == (
        "POST",
        "/v1/chat/completions",
        "gpt-x",
    )
    assert chat["status"] == 400
    assert "POST /v1/chat/completions route=- model=gpt-x status=400" in lines[-1].getMessage()


def test_every_line_of_a_served_proxy_carries_the_proxys_own_logger_name() -> None:
    with serving("--upstream", "http://127.0.0.1:9/v1") as proxy:
        httpx.get(f"{proxy.url}/v1/models", timeout=10)
    names = [line.split()[3] for line in proxy.stderr_lines() if len(line.split()) > 3]
    assert names and all(name.startswith("proxy.") for name in names), proxy.stderr
    assert "uvicorn.error" not in proxy.stderr


def test_every_response_says_what_the_proxy_changed() -> None:
    with (
        running_fake_upstream() as (_, root),
        serve_in_thread(
            create_app(Settings().with_values({"upstream.base_url": f"{root}/v1"}))
        ) as proxy,
    ):
        responses = [
            httpx.get(f"{proxy}/healthz"),
            httpx.get(f"{proxy}/readyz"),
            httpx.get(f"{proxy}/metrics"),
            httpx.get(f"{proxy}/no/such/route"),
            httpx.get(f"{proxy}/v1/models"),
            httpx.post(f"{proxy}/v1/chat/completions", content=b"{not json"),
        ]
    for response in responses:
        assert response.headers.get_list("x-streamfix-repairs") == ["none"], response.url
