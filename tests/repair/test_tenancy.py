"""Tenants (proxy/repair/tenancy.py `tenant_of`): every credential form the proxy forwards
(Authorization, x-api-key, x-goog-api-key, api-key, `?key=`) names a tenant of its own; no
credential is no tenant; `signatures.tenant_header` only subdivides a credential's tenant.

Each test says what would break without the behaviour it checks.
"""

from __future__ import annotations

import pytest

from proxy.repair.tenancy import ReceiptScope, tenant_of


@pytest.mark.parametrize(
    "form",
    [
        {"authorization": "Bearer K"},
        {"x-api-key": "K"},
        {"x-goog-api-key": "K"},
        {"api-key": "K"},
        {"query": "key=K"},
        {"query": "alt=sse&key=K"},
    ],
    ids=["authorization", "x-api-key", "x-goog-api-key", "api-key", "query", "query-among"],
)
def test_every_credential_form_names_a_tenant_of_its_own(form: dict[str, str]) -> None:
    # Without it (only Authorization and x-api-key counted) every x-goog-api-key, api-key and
    # `?key=` client was the one tenant "anonymous".
    headers = {k: v for k, v in form.items() if k != "query"}
    query = form.get("query", "")
    mine = tenant_of(headers, query=query)
    other = tenant_of(
        {k: v.replace("K", "L") for k, v in headers.items()}, query=query.replace("K", "L")
    )
    assert mine is not None and other is not None
    assert mine != other
    assert "K" not in mine and len(mine) == 32  # a hash, never the credential


def test_the_same_key_in_two_forms_is_two_tenants_and_all_forms_count() -> None:
    # Which form the upstream reads is its business; the proxy never merges two requests that
    # differ in any credential they carry.
    forms = [
        {"authorization": "Bearer K"},
        {"x-api-key": "K"},
        {"x-goog-api-key": "K"},
        {"api-key": "K"},
        {"x-api-key": "K", "api-key": "L"},
    ]
    tenants = {tenant_of(headers) for headers in forms}
    tenants.add(tenant_of({}, query=b"key=K"))
    assert len(tenants) == len(forms) + 1


def test_query_values_are_taken_as_sent() -> None:
    # Decoded, `%ff` and `%fe` would both be U+FFFD: two different keys, one tenant.
    assert tenant_of({}, query=b"key=a%ff") != tenant_of({}, query=b"key=a%fe")
    assert tenant_of({}, query="key=K") == tenant_of({}, query=b"key=K")


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({}, b""),
        ({"authorization": ""}, b""),
        ({"authorization": "Bearer "}, b""),
        ({"x-api-key": "  "}, b""),
        ({"content-type": "application/json"}, b"alt=sse&key="),
        ({"x-tenant": "alice"}, b""),  # a tenant header alone is no credential
    ],
)
def test_no_credential_is_no_tenant(headers: dict[str, str], query: bytes) -> None:
    # Without it, all such requests shared the tenant "anonymous", and its receipts.
    assert tenant_of(headers, "x-tenant", query=query) is None
    scope = ReceiptScope(None, "u")
    assert not scope.keeps_receipts
    with pytest.raises(ValueError, match="no store keys"):
        scope.key("call:x")


def test_the_tenant_header_subdivides_a_credential_and_never_replaces_it() -> None:
    # Before: the header alone was the tenant, so anyone sending `x-tenant: alice` with any key
    # (or none) reached alice's receipts.
    alice = tenant_of({"authorization": "Bearer shared", "x-tenant": "alice"}, "x-tenant")
    bob = tenant_of({"authorization": "Bearer shared", "x-tenant": "bob"}, "x-tenant")
    intruder = tenant_of({"authorization": "Bearer mine", "x-tenant": "alice"}, "x-tenant")
    plain = tenant_of({"authorization": "Bearer shared"}, "x-tenant")
    assert len({alice, bob, intruder, plain}) == 4
    assert tenant_of({"authorization": "Bearer shared", "x-tenant": "alice"}) == plain
