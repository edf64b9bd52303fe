"""The effective configuration as `streamfix config` prints it: secrets masked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from proxy.server.auth import parse_keys
from proxy.settings.schema import Settings
from proxy.wire.credentials import SECRET_PARAMETERS

MASK = "****"


def masked(settings: Settings, environ: Mapping[str, str]) -> dict[str, Any]:
    document = settings.to_dict()
    document["signatures"]["store"] = _mask_url(document["signatures"]["store"])
    for upstream in [document["upstream"], *document["routes"]]:
        upstream["base_url"] = _mask_url(upstream["base_url"])
        if upstream["api_key_env"]:
            present = bool(environ.get(upstream["api_key_env"]))
            upstream["api_key"] = (
                f"{MASK} (from ${upstream['api_key_env']})" if present else "unset"
            )
    keys = parse_keys(environ.get("STREAMFIX_API_KEYS"))
    document["proxy_api_keys"] = f"{len(keys)} key(s) from $STREAMFIX_API_KEYS" if keys else "none"
    return document


def _mask_url(url: str) -> str:
    """A password in a URL (redis://:secret@host, ?password=, ?key=) is a secret too."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password:
        user = parts.username or ""
        netloc = f"{user}:{MASK}@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    query = urlencode(
        [
            (name, MASK if name.lower() in SECRET_PARAMETERS else value)
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
        ],
        safe="*",
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))
