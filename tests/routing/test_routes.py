"""Routes by model (proxy/routing/routes.py `Router`): the first matching route wins, else the
default upstream; every validation error names its key, and a route key read from a missing
environment variable stops start-up.
"""

from __future__ import annotations

import re

import pytest

from proxy.repair.rules import resolve
from proxy.routing.routes import CHAT_PATH, RULES_CACHED_MODELS, Router, upstream_url
from proxy.settings.schema import ConfigError, Settings


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


def test_the_chat_url_built_at_start_up_is_the_one_built_per_request() -> None:
    settings = Settings().with_values({"upstream.base_url": "http://127.0.0.1:1/a%20b/v1/"})
    default = Router(settings, {}).default
    assert default.url(CHAT_PATH, b"") is default.chat_url
    assert default.chat_url == upstream_url(default.upstream, CHAT_PATH, b"")
    assert str(default.chat_url) == "http://127.0.0.1:1/a%20b/v1/chat/completions"
    # With a query, or another path, the URL is built for the request.
    assert str(default.url(CHAT_PATH, b"x=1")) == str(default.chat_url) + "?x=1"
    assert str(default.url(b"models", b"")) == "http://127.0.0.1:1/a%20b/v1/models"


def test_rules_kept_per_model_are_the_rules_resolved_for_it() -> None:
    settings = Settings().with_values({"upstream.base_url": "https://api.moonshot.ai/v1"})
    default = Router(settings, {}).default
    first = default.rules("kimi-k2")
    assert default.rules("kimi-k2") is first
    assert first == resolve(default.upstream, default.profile("kimi-k2"))
    assert default.rules(None) is first  # one profile per route: one resolved value
    for n in range(RULES_CACHED_MODELS + 10):  # past the bound: still right, just not kept
        assert default.rules(f"m{n}") is first
