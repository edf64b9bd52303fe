"""The request and answer rules in force for one route, in words, as `streamfix config` shows
them: the route's keys resolved against its profile ("auto" spelled out), so an operator sees
what a Gemini host or a `[[routes]]` override really does without reading the profile table."""

from __future__ import annotations

from dataclasses import fields

from proxy.repair.profiles import ParameterRule
from proxy.repair.tenancy import upstream_identity
from proxy.settings.schema import UpstreamSettings
from proxy.upstream.routes import UpstreamRoute, client_timeout


def rules_in_force(upstream: UpstreamSettings) -> str:
    route = UpstreamRoute(
        name="-",
        upstream=upstream,
        patterns=(),
        upstream_key=None,  # what the rules are does not depend on the key
        identity=upstream_identity(upstream.base_url),
        timeout=client_timeout(upstream),
    )
    profile = route.profile(None)
    messages = route.message_rules(profile)
    parts = [
        f"profile {profile.name}",
        f"tool schemas {route.schema_dialect(profile) or 'as sent'}",
        f"tool names {route.tool_name_rule(profile) or 'as sent'}",
        *(f"{rule.name} {getattr(messages, rule.name)}" for rule in fields(messages)),
        "parameters " + (", ".join(map(_parameter, profile.parameters)) or "as sent"),
        "rejected parameters " + ("learned" if upstream.learn_rejected_parameters else "relayed"),
        "text tool calls " + ("recognised" if upstream.text_tool_calls else "as sent"),
        "text reasoning " + (upstream.reasoning_field if upstream.text_reasoning else "as sent"),
    ]
    return "; ".join(parts)


def _parameter(rule: ParameterRule) -> str:
    action = f"as {rule.rename_to}" if rule.rename_to else "dropped"
    when = f" when {'/'.join(map(repr, rule.only_values))}" if rule.only_values else ""
    return f"{rule.name} {action}{when}"
