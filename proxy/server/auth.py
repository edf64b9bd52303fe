"""The proxy's own keys checked on a request: required as soon as any route spends an upstream
key of its own, so the proxy is never an open relay for a paid key. They are read from
`STREAMFIX_API_KEYS` by `proxy.settings.values.parse_keys`."""

from __future__ import annotations

import hmac
from collections.abc import Mapping


def presented_key(headers: Mapping[str, str]) -> str | None:
    authorization = headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key") or None


def is_allowed(headers: Mapping[str, str], keys: tuple[str, ...]) -> bool:
    """Constant-time comparison against every key, so timing tells nothing about any of them."""
    presented = (presented_key(headers) or "").encode()
    allowed = False
    for key in keys:
        allowed |= hmac.compare_digest(presented, key.encode())
    return allowed and bool(presented)
