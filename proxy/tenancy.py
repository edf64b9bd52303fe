"""Who a request belongs to, for keeping one client's receipts out of another's requests."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass


def tenant_of(headers: Mapping[str, str], tenant_header: str = "") -> str:
    """A hash of the configured tenant header, else of the client's credential.

    Only the hash is ever kept: the credential itself is never stored or logged.
    """
    value = headers.get(tenant_header) if tenant_header else None
    value = value or headers.get("authorization") or headers.get("x-api-key")
    if not value:
        return "anonymous"
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def upstream_identity(base_url: str) -> str:
    """Receipts validate only on the backend that issued them: keys carry its identity."""
    return hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ReceiptScope:
    """Whose receipts these are: a tenant (hashed credential) on one upstream."""

    tenant: str
    upstream: str

    def key(self, key: str) -> str:
        return f"{self.tenant}:{self.upstream}:{key}"
