"""The request and answer rules in force for one route, in words, as `streamfix config` shows
them: the route's keys resolved against its profile ("auto" spelled out), so an operator sees
what a Gemini host or a `[[routes]]` override really does without reading the profile table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from proxy.learning.refusal_memory import learned_in_redis
from proxy.repair.profiles import ParameterRule
from proxy.repair.tenancy import upstream_identity
from proxy.routing.routes import UpstreamRoute, client_timeout
from proxy.settings.schema import ReceiptSettings, UpstreamSettings
from proxy.store.opening import redis_options


def rules_in_force(upstream: UpstreamSettings) -> str:
    route = UpstreamRoute(
        name="-",
        upstream=upstream,
        patterns=(),
        upstream_key=None,  # what the rules are does not depend on the key
        identity=upstream_identity(upstream.base_url),
        timeout=client_timeout(upstream),
    )
    rules = route.rules(None)
    parts = [
        f"profile {rules.profile.name}",
        f"tool schemas {rules.schema_dialect or 'as sent'}",
        f"tool names {rules.tool_names or 'as sent'}",
        *(f"{rule.name} {getattr(rules.messages, rule.name)}" for rule in fields(rules.messages)),
        f"response_format_schema {rules.response_format_schema}",
        f"max_tokens_limit {rules.max_tokens_limit or 'as sent'}",
        f"forced_tool_choice {rules.forced_tool_choice}",
        f"cache_control {rules.cache_control}",
        "parameters " + (", ".join(map(_parameter, rules.profile.parameters)) or "as sent"),
        "rejected parameters " + ("learned" if rules.learn_rejected_parameters else "relayed"),
        "text tool calls " + ("recognised" if rules.markup.text_tool_calls else "as sent"),
        "text reasoning "
        + (rules.markup.reasoning_field if rules.markup.text_reasoning else "as sent"),
        "learned from refusals " + (", ".join(sorted(rules.learnable)) or "nothing"),
    ]
    return "; ".join(parts)


def learned(
    receipts: ReceiptSettings, upstream: UpstreamSettings, environ: Mapping[str, str]
) -> str:
    """What running proxies learned from this route's upstream's refusals, where the CLI can
    see it: in Redis, shared by every replica; a memory store is each process's own."""
    if receipts.store == "memory":
        return "kept by each running proxy (receipts.store is memory): not visible from here"
    found = learned_in_redis(redis_options(receipts, environ), upstream_identity(upstream.base_url))
    if found is None:
        return "the store did not answer"
    return "; ".join(found) or "nothing yet"


def _parameter(rule: ParameterRule) -> str:
    action = f"as {rule.rename_to}" if rule.rename_to else "dropped"
    when = f" when {'/'.join(map(repr, rule.only_values))}" if rule.only_values else ""
    return f"{rule.name} {action}{when}"
