"""The proxy's own keys (`STREAMFIX_API_KEYS`, read by proxy/settings/values.py `parse_keys`): a
value of nothing but commas and blanks stops start-up, in-process and for `streamfix serve` (exit
2); unset or given keys parse as before; a route's key is refused without proxy keys, and with
them they guard a paid upstream key (over real sockets).

Each test says what would break without the behaviour it checks.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import httpx
import pytest

from proxy.server.app import Proxy, create_app
from proxy.settings.schema import ConfigError, Settings
from proxy.settings.values import parse_keys
from tests.support.fake_upstream import running_fake_upstream
from tests.support.servers import free_port, serve_in_thread


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


UPSTREAM_KEY = "sk-upstream-PAID-4242"
PROXY_KEY = "sfx-proxy-key-7"


def chat(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


def route(name: str, patterns: list[str], base_url: str, **extra) -> dict:
    return {"name": name, "models": patterns, "base_url": base_url, **extra}


def keyed_stack(upstream_root: str, monkeypatch: pytest.MonkeyPatch, proxy_keys: str | None):
    monkeypatch.setenv("TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    if proxy_keys is None:
        monkeypatch.delenv("STREAMFIX_API_KEYS", raising=False)
    else:
        monkeypatch.setenv("STREAMFIX_API_KEYS", proxy_keys)
    settings = Settings().with_values(
        {
            "upstream.base_url": f"{upstream_root}/v1",
            "repairs.strict": True,
            "routes": [
                route(
                    "paid",
                    ["gemini_*"],
                    f"{upstream_root}/v1beta/openai",
                    api_key_env="TEST_UPSTREAM_KEY",
                    model="gemini_indexless_call_stop",
                )
            ],
        }
    )
    return create_app(settings)


def test_a_route_key_without_proxy_keys_refuses_to_start(monkeypatch) -> None:
    with (
        running_fake_upstream() as (_, root),
        pytest.raises(ConfigError, match="STREAMFIX_API_KEYS"),
    ):
        keyed_stack(root, monkeypatch, None)


def test_proxy_keys_guard_a_paid_upstream_key(monkeypatch, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with (
        running_fake_upstream() as (fake, root),
        serve_in_thread(keyed_stack(root, monkeypatch, f"other-key, {PROXY_KEY}")) as proxy,
    ):
        url = f"{proxy}/v1/chat/completions"
        for headers in ({}, {"authorization": "Bearer wrong"}, {"x-api-key": "sfx-proxy-key"}):
            denied = httpx.post(url, json=chat("gemini_x", stream=True), headers=headers)
            assert denied.status_code == 401
            assert denied.json()["error"]["type"] == "authentication_error"
            assert UPSTREAM_KEY not in denied.text
        assert httpx.get(f"{proxy}/v1/models").status_code == 401
        assert fake.requests == []

        allowed = httpx.post(
            url,
            json=chat("gemini_anything", stream=True),
            headers={"authorization": f"Bearer {PROXY_KEY}"},
        )
        assert allowed.status_code == 200
        sent = fake.requests[-1]
        assert sent.path == "/v1beta/openai/chat/completions"  # the route's upstream
        assert sent.json["model"] == "gemini_indexless_call_stop"  # rewritten for upstream
        assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert PROXY_KEY not in str(sent.headers)  # the proxy's key never travels upstream
        by_key = httpx.post(
            url, json=chat("gemini_y", stream=True), headers={"x-api-key": PROXY_KEY}
        )
        assert by_key.status_code == 200

        metrics = httpx.get(f"{proxy}/metrics").text
    assert UPSTREAM_KEY not in metrics and PROXY_KEY not in metrics
    assert UPSTREAM_KEY not in caplog.text and PROXY_KEY not in caplog.text
