"""Routes by model, the proxy's own keys, and the Prometheus metrics, over real sockets."""

from __future__ import annotations

import logging
import re

import httpx
import pytest

from proxy.server.app import create_app
from proxy.settings.schema import ConfigError, Settings
from proxy.upstream.routes import Router
from tests.support.fake_upstream import running_fake_upstream
from tests.support.servers import serve_in_thread

UPSTREAM_KEY = "sk-upstream-PAID-4242"
PROXY_KEY = "sfx-proxy-key-7"


def chat(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


def route(name: str, patterns: list[str], base_url: str, **extra) -> dict:
    return {"name": name, "models": patterns, "base_url": base_url, **extra}


def test_first_matching_route_wins_else_the_default() -> None:
    settings = Settings().with_values(
        {
            "upstream.base_url": "http://127.0.0.1:1/default",
            "routes": [
                route("kimi", ["kimi-*", "moonshot*"], "https://api.moonshot.ai/v1"),
                route("any-k", ["k*"], "http://127.0.0.1:2/v1"),
            ],
        }
    )
    router = Router(settings, {})
    assert router.route_for("kimi-k2").name == "kimi"
    assert router.route_for("k3").name == "any-k"
    assert router.route_for("gemini-3-pro").name == "default"
    assert router.route_for(None).name == "default"
    assert router.route_for("kimi-k2").profile("kimi-k2").name == "kimi"
    # A host that says nothing gets the evidence profile, whatever the model's name.
    assert router.route_for("gemini-3-pro").profile("gemini-3-pro").name == "generic"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"routes": [route("", ["a"], "http://x")]}, "routes[0].name"),
        ({"routes": [route("a", ["a"], "http://x"), route("a", ["b"], "http://y")]}, "unique"),
        ({"routes": [route("a", ["a"], "nope")]}, "routes[0].base_url"),
        ({"routes": [route("a", ["a"], "http://x", profile="bard")]}, "routes[0].profile"),
        ({"routes": [route("a", ["a"], "http://x", timeout=3)]}, "routes[0].timeout: unknown"),
        ({"routes": {"a": 1}}, "routes: must be a list"),
        ({"server.port": 70000}, "server.port"),
        ({"server.log_format": "xml"}, "server.log_format"),
        ({"signatures.store": "mongodb://x"}, "signatures.store"),
        ({"signatures.on_missing": "guess"}, "signatures.on_missing"),
        ({"recording.record_dir": "a", "recording.replay_dir": "b"}, "recording.record_dir"),
    ],
)
def test_every_validation_error_names_its_key(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Settings().with_values(values)


def test_route_key_from_a_missing_environment_variable_stops_start_up() -> None:
    settings = Settings().with_values({"upstream.api_key_env": "STREAMFIX_TEST_MISSING_KEY"})
    with pytest.raises(ConfigError, match=r"upstream\.api_key_env"):
        Router(settings, {})


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


def metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{wanted}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_count_a_repaired_gemini_stream() -> None:
    settings_values = {"repairs.strict": True}
    with running_fake_upstream() as (_, root):
        settings = Settings().with_values({"upstream.base_url": f"{root}/v1", **settings_values})
        with serve_in_thread(create_app(settings)) as proxy:
            before = httpx.get(f"{proxy}/metrics").text
            response = httpx.post(
                f"{proxy}/v1/chat/completions",
                json=chat("gemini_empty_id", stream=True),
                headers={"authorization": "Bearer k"},
            )
            assert response.status_code == 200
            after = httpx.get(f"{proxy}/metrics").text
            ready = httpx.get(f"{proxy}/readyz")
    assert ready.status_code == 200 and ready.json()["store"] is True
    labels = {"route": "default", "status": "200"}
    assert (
        metric(after, "streamfix_requests_total", **labels)
        == metric(before, "streamfix_requests_total", **labels) + 1
    )
    assert metric(after, "streamfix_repairs_total", kind="tool_call_id_generated") == 1
    assert metric(after, "streamfix_signatures_total", event="captured") == 1
    assert metric(after, "streamfix_active_streams") == 0
    assert metric(after, "streamfix_upstream_ttfb_seconds_count", route="default") == 1
    assert metric(after, "streamfix_upstream_duration_seconds_count", route="default") == 1
