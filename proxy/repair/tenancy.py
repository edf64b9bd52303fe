"""Who a request belongs to, for keeping one client's receipts out of another's requests.

The tenant is the credential the client sent, in whatever form the proxy forwards it: a
receipt the upstream issued to one key must never reach a request made with another. A request
without any credential has no tenant: nothing is captured for it and nothing is put back (a
shared "anonymous" bucket would hand every keyless client everybody else's receipts).

`receipts.tenant_header` only subdivides a credential's tenant: the tenant is a hash of the
credential and the header's value together. A client that does not hold another's credential
cannot reach its receipts whatever header it sends, and behind one shared proxy key the header
(set by a trusted hop, such as an authenticating gateway) keeps its users apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote_plus

from proxy.wire import json_codec
from proxy.wire.credentials import CREDENTIAL_HEADERS, CREDENTIAL_PARAMETERS

# Every credential form the proxy forwards names the tenant (proxy/wire/credentials.py).
# An Authorization value with a scheme and no token is no credential.
_EMPTY_SCHEMES = frozenset({"bearer", "basic"})
_HEADER_NAMES = {name.encode("latin-1"): name for name in CREDENTIAL_HEADERS}


def credentials_of(headers: Mapping[str, str], query: str | bytes = b"") -> list[tuple[str, str]]:
    """Every credential the request carries, as (where, value), in a fixed order."""
    found = []
    for name, value in _credential_headers(headers):
        value = value.strip()
        if value and not (name == "authorization" and value.lower() in _EMPTY_SCHEMES):
            found.append((name, value))
    return found + _query_credentials(query)


def _credential_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every value of every credential header, in CREDENTIAL_HEADERS' order, then as sent.
    Headers with their raw fields (Starlette's, on every request) are read in one pass over
    them, not one `getlist` pass per credential header name (a few µs per request)."""
    raw = getattr(headers, "raw", None)
    if not isinstance(raw, list):
        return [(name, value) for name in CREDENTIAL_HEADERS for value in _values(headers, name)]
    by_name: dict[str, list[str]] = {}
    for key, value in raw:
        name = _HEADER_NAMES.get(key.lower())
        if name is not None:
            by_name.setdefault(name, []).append(value.decode("latin-1"))
    return [(name, value) for name in CREDENTIAL_HEADERS for value in by_name.get(name, ())]


def _query_credentials(query: str | bytes) -> list[tuple[str, str]]:
    """Credential parameters of the raw query string, their values as sent: decoding them
    could make two different keys one tenant (invalid UTF-8 all decodes to U+FFFD)."""
    text = query.decode("latin-1") if isinstance(query, bytes) else query
    found = []
    for field in text.split("&") if text else ():
        name, _, value = field.partition("=")
        if value and unquote_plus(name).lower() in CREDENTIAL_PARAMETERS:
            found.append(("?" + name, value))
    return sorted(found)


def tenant_of(
    headers: Mapping[str, str], tenant_header: str = "", *, query: str | bytes = b""
) -> str | None:
    """A hash of the client's credentials (and of `tenant_header`'s value, which subdivides
    them); None when the request carries no credential at all.

    Only the hash is ever kept: the credential itself is never stored or logged.
    """
    credentials = credentials_of(headers, query)
    if not credentials:
        return None
    subdivision = headers.get(tenant_header) if tenant_header else None
    # JSON, not a joined string: no choice of values can make two different requests collide.
    material = json_codec.dumps([credentials, subdivision])
    return hashlib.sha256(material).hexdigest()[:32]


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    """All values of a repeated header (the upstream may read any of them), else the one."""
    getlist = getattr(headers, "getlist", None)
    if getlist is not None:
        return list(getlist(name))
    value = headers.get(name)
    return [value] if value is not None else []


def upstream_identity(base_url: str) -> str:
    """Receipts validate only on the backend that issued them: keys carry its identity."""
    return hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ReceiptScope:
    """Whose receipts these are: a tenant (hashed credential) on one upstream. A scope without
    a tenant (a request with no credential) keeps no receipts at all."""

    tenant: str | None
    upstream: str

    @property
    def keeps_receipts(self) -> bool:
        return bool(self.tenant)

    def key(self, key: str) -> str:
        """`{tenant:upstream}:key`. The braces are Redis Cluster's hash tag: every key of one
        scope is in one slot, so a request's lookups (all its calls' receipts, a Responses
        turn with its items) are one MGET on one node, never a cross-slot error."""
        if not self.tenant:  # a caller that skipped the check must not reach a shared bucket
            raise ValueError("a scope without a tenant has no store keys")
        return f"{{{self.tenant}:{self.upstream}}}:{key}"
