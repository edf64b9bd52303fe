"""The effective configuration as `streamfix config` prints it: secrets masked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.settings.schema import Settings
from proxy.settings.values import parse_keys
from proxy.wire.credentials import MASK, masked_url


def masked(settings: Settings, environ: Mapping[str, str]) -> dict[str, Any]:
    document = settings.to_dict()
    document["receipts"]["store"] = masked_url(document["receipts"]["store"])
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
