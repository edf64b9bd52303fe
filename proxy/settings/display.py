"""The effective configuration as `streamfix config` prints it: secrets masked, as TOML to paste
into a config file or as JSON for tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from proxy.repair.rules import RouteRuleKeys
from proxy.settings.schema import Settings, UpstreamSettings
from proxy.settings.toml_text import dumps
from proxy.settings.values import parse_keys
from proxy.wire.credentials import MASK, masked_url

# Shown, but not config keys: where each secret comes from (secrets never become settings).
NOTES = ("api_key", "proxy_api_keys", "rules_in_force", "learned")

TOML_HEADER = f"""\
# streamfix effective configuration: defaults, the config file, STREAMFIX_* variables and flags.
# Paste it into a config file as it is. Secrets are never printed: {MASK} stands in for a
# password in a URL (put the real one back), and the lines for keys read from the environment
# are comments.
"""


def as_toml(document: dict[str, Any]) -> str:
    """The `masked` document as TOML that tomllib reads back to the same settings."""
    return TOML_HEADER + "\n" + dumps(document, NOTES)


def masked(settings: Settings, environ: Mapping[str, str]) -> dict[str, Any]:
    document = settings.to_dict()
    document["receipts"]["store"] = masked_url(document["receipts"]["store"])
    document["upstream"] = _rules_after_connection(document["upstream"])
    document["routes"] = [_rules_after_connection(route) for route in document["routes"]]
    for upstream in [document["upstream"], *document["routes"]]:
        upstream["base_url"] = masked_url(upstream["base_url"])
        if upstream["api_key_env"]:
            present = bool(environ.get(upstream["api_key_env"]))
            upstream["api_key"] = (
                f"{MASK} (from ${upstream['api_key_env']})" if present else "unset"
            )
    keys = parse_keys(environ.get("STREAMFIX_API_KEYS"))
    document["proxy_api_keys"] = f"{len(keys)} key(s) from $STREAMFIX_API_KEYS" if keys else "none"
    return document


_RULE_KEYS = [key.name for key in fields(RouteRuleKeys)]
_CONNECTION_KEYS = [key.name for key in fields(UpstreamSettings) if key.name not in _RULE_KEYS]


def _rules_after_connection(table: dict[str, Any]) -> dict[str, Any]:
    """An upstream table in the order it has always been printed: where the upstream is and
    how it is reached, then the route's rules (which the settings inherit, so declare first),
    then the rest (a route's name and models)."""
    ordered = {key: table[key] for key in [*_CONNECTION_KEYS, *_RULE_KEYS]}
    return ordered | {key: value for key, value in table.items() if key not in ordered}
