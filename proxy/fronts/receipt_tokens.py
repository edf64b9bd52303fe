"""Receipt tokens: what a stateless client carries back so a follow-up finds its receipts.

Codex sends `store: false` and the whole history every turn, echoing a reasoning item's
`encrypted_content` byte for byte; Anthropic clients echo a thinking block's `signature` the same
way. A front puts a token there that names where the turn's receipts (Gemini signatures,
`reasoning_content`, `reasoning_details`) sit in the receipt store, never the receipts
themselves: a client may log or show what it echoes.

    sf1.<base64url(json {"s": scope digest, "k": receipt key})>.<base64url(hmac-sha256)>

The MAC covers the version and the payload, with a server secret: a token the proxy did not
mint, or one edited by a byte, reads as None. The payload names the scope (tenant and upstream,
hashed): a token minted for one tenant reads as None for every other, so a client holding
another's token still cannot reach its receipts. The secret comes from STREAMFIX_RECEIPT_SECRET;
without it each process draws its own (logged once), and then replicas, or a restarted proxy,
cannot read each other's tokens: the receipts are then simply not restored by token (the
receipt store's own keys still apply).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Mapping

from proxy.wire import json_codec

logger = logging.getLogger(__name__)

VERSION = "sf1"
SECRET_VARIABLE = "STREAMFIX_RECEIPT_SECRET"
MAX_TOKEN_CHARS = 4096
"""Longer is not ours: refused before any decoding work."""


class ReceiptTokens:
    """Mints and reads tokens under one secret."""

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("a receipt token secret must not be empty")
        self._secret = secret

    def mint(self, scope_key: str, receipt_key: str) -> str:
        payload = json_codec.dumps({"s": _scope_digest(scope_key), "k": receipt_key})
        body = f"{VERSION}.{_b64(payload)}"
        return f"{body}.{_b64(self._mac(body))}"

    def read(self, token: str, scope_key: str) -> str | None:
        """The receipt key a token minted here for this scope names; None for anything else
        (garbage, another version, a tampered byte, another tenant's or upstream's token)."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or not token.isascii():
            return None
        version, _, rest = token.partition(".")
        encoded, _, mac = rest.partition(".")
        if version != VERSION or not encoded or not mac:
            return None
        expected = _b64(self._mac(f"{version}.{encoded}"))
        if not hmac.compare_digest(expected.encode(), mac.encode()):
            return None
        try:
            payload = json_codec.loads(_unb64(encoded))
        except (ValueError, json_codec.JSONDecodeError):
            return None
        if not isinstance(payload, dict) or payload.get("s") != _scope_digest(scope_key):
            return None
        key = payload.get("k")
        return key if isinstance(key, str) else None

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._secret, body.encode(), hashlib.sha256).digest()


def _scope_digest(scope_key: str) -> str:
    return hashlib.sha256(scope_key.encode()).hexdigest()[:32]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def tokens_from_environ(environ: Mapping[str, str] | None = None) -> ReceiptTokens:
    """Tokens under STREAMFIX_RECEIPT_SECRET, else under a secret of this process alone."""
    environ = os.environ if environ is None else environ
    secret = environ.get(SECRET_VARIABLE, "")
    if secret:
        return ReceiptTokens(secret.encode())
    logger.warning(
        "%s is not set: receipt tokens use a secret of this process, so other replicas and a "
        "restarted proxy cannot read them (set it to one value on every replica)",
        SECRET_VARIABLE,
    )
    return ReceiptTokens(secrets.token_bytes(32))


_default: ReceiptTokens | None = None


def _tokens() -> ReceiptTokens:
    global _default
    if _default is None:
        _default = tokens_from_environ()
    return _default


def mint(scope_key: str, receipt_key: str) -> str:
    """A token naming `receipt_key` that only `scope_key` can read back (process-wide secret)."""
    return _tokens().mint(scope_key, receipt_key)


def read(token: str, scope_key: str) -> str | None:
    """The receipt key `token` names for `scope_key`; None when foreign, tampered or garbage:
    the caller counts it and drops it, never trusts it."""
    return _tokens().read(token, scope_key)
