"""The proxy's own keys: required as soon as any route spends an upstream key of its own,
so the proxy is never an open relay for a paid key."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from proxy.settings.values import ConfigError


def parse_keys(value: str | None) -> tuple[str, ...]:
    """`STREAMFIX_API_KEYS`: comma-separated. Unset means no keys; set to nothing but commas and
    blanks (`" , "`, or `""` from a secret that did not expand) is refused, since it would
    silently switch off the authentication it was meant to switch on."""
    if value is None:
        return ()
    keys = tuple(key.strip() for key in value.split(",") if key.strip())
    if not keys:
        raise ConfigError(
            "STREAMFIX_API_KEYS: set but holds no key (only commas and blanks); give one or "
            "more comma-separated keys, or unset it to run without the proxy's own keys"
        )
    return keys


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
