"""The route rules: one set of keys, named as in the config file, resolved once per route and
profile ("auto" the profile's value, "none" as sent)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from proxy.repair.markup.rules import MarkupRules
from proxy.repair.profiles import PROFILES, MessageRules
from proxy.repair.rules import RouteRuleKeys, RouteRules, resolve
from proxy.routing.routes import Router
from proxy.settings.schema import RouteSettings, Settings, UpstreamSettings
from proxy.wire.config_values import ConfigError


def test_default_rules_are_the_default_keys_on_the_evidence_profile() -> None:
    assert resolve(RouteRuleKeys(), PROFILES["generic"]) == RouteRules()


def test_auto_is_the_profiles_value_and_none_is_as_sent() -> None:
    gemini = PROFILES["gemini"]
    assert resolve(RouteRuleKeys(), gemini).tool_names == "gemini"
    assert resolve(RouteRuleKeys(), gemini).schema_dialect == "gemini"
    assert resolve(RouteRuleKeys(tool_names="none", schema_dialect="none"), gemini) == RouteRules(
        gemini
    )
    kimi = resolve(RouteRuleKeys(developer_role="system"), PROFILES["kimi"]).messages
    assert kimi == MessageRules(developer_role="system", tool_content="string")


def test_rule_fields_carry_the_config_keys_names() -> None:
    keys = {key.name for key in fields(RouteRuleKeys)}
    assert {rule.name for rule in fields(MessageRules)} <= keys
    assert {rule.name for rule in fields(MarkupRules)} <= keys
    assert {"tool_names", "schema_dialect", "learn_rejected_parameters"} <= keys
    assert {"tool_names", "schema_dialect", "learn_rejected_parameters"} <= {
        rule.name for rule in fields(RouteRules)
    }


def test_the_settings_embed_the_keys_and_their_checks() -> None:
    assert issubclass(UpstreamSettings, RouteRuleKeys) and issubclass(RouteSettings, RouteRuleKeys)
    with pytest.raises(ConfigError, match="tool_names: must be one of"):
        Settings().with_values({"upstream.tool_names": "anything"})
    with pytest.raises(ConfigError, match=r"routes\[0\]\.developer_role: must be one of"):
        Settings().with_values(
            {"routes": [{"name": "r", "models": ["m"], "developer_role": "nobody"}]}
        )


def test_a_route_resolves_its_rules_once_per_profile() -> None:
    settings = Settings().with_values({"upstream.tool_names": "openai"})
    route = Router(settings, {}).default
    first = route.rules("gemini-2.5-flash")
    assert first is route.rules("any-other-model")  # the profile is the host's: one value
    assert first.tool_names == "openai" and first.profile is PROFILES["gemini"]
