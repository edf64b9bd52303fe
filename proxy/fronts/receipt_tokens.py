"""Tamper-evident, tenant-bound tokens that point at the receipts of one assistant turn.

A front hands a client an opaque token (the Responses front in a reasoning item's
`encrypted_content`, the Messages front in a thinking block's `signature`); the client sends it
back unchanged with the turn. The token carries the store key of that turn's receipts, bound to
the tenant and upstream (`scope_key`) it was minted for, under an HMAC-SHA256 with a server
secret: a token another tenant, another proxy or a hand edit produced reads as None, and the
caller drops it and counts it.

The secret comes from STREAMFIX_RECEIPT_SECRET. Without it each process draws a random one (a
startup warning says so): replicas then cannot read each other's tokens, and a restart makes
earlier tokens foreign (their turns still get receipts back by call id and text from the store).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os

logger = logging.getLogger(__name__)

SECRET_ENV = "STREAMFIX_RECEIPT_SECRET"
PREFIX = "sfr1."
"""Versioned: a later format gets a new prefix, and this one still reads its own tokens."""

_secret: bytes | None = None


def _key() -> bytes:
    global _secret
    if _secret is None:
        configured = os.environ.get(SECRET_ENV, "")
        if configured:
            _secret = hashlib.sha256(configured.encode()).digest()
        else:
            logger.warning(
                "%s is not set: receipt tokens use a per-process secret, so other replicas "
                "and a restarted proxy cannot read the tokens this one hands out",
                SECRET_ENV,
            )
            _secret = os.urandom(32)
    return _secret


def _mac(scope_key: str, payload: bytes) -> bytes:
    message = PREFIX.encode() + scope_key.encode() + b"\x1f" + payload
    return hmac.new(_key(), message, hashlib.sha256).digest()[:20]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint(scope_key: str, receipt_key: str) -> str:
    """A token for `receipt_key`, readable only under the same `scope_key` and secret."""
    payload = receipt_key.encode()
    return PREFIX + _b64(payload) + "." + _b64(_mac(scope_key, payload))


def read(token: str, scope_key: str) -> str | None:
    """The receipt key `token` carries; None for a foreign, tampered or other-tenant token."""
    if not isinstance(token, str) or not token.startswith(PREFIX):
        return None
    body, _, mac = token[len(PREFIX) :].partition(".")
    try:
        payload = _unb64(body)
        given = _unb64(mac)
        expected = _mac(scope_key, payload)
        return payload.decode() if hmac.compare_digest(given, expected) else None
    except (ValueError, UnicodeDecodeError):
        return None
