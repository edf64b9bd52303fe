"""Receipt tokens: tamper-evident, tenant-bound, versioned, and garbage-proof."""

from __future__ import annotations

import logging

import pytest

from proxy.fronts import receipt_tokens
from proxy.fronts.receipt_tokens import ReceiptTokens, tokens_from_environ

TOKENS = ReceiptTokens(b"k" * 32)
SCOPE = "tenant-a:upstream-1:"


def test_a_token_reads_back_its_key_in_its_scope() -> None:
    token = TOKENS.mint(SCOPE, "turn:resp_1")
    assert token.startswith("sf1.")
    assert TOKENS.read(token, SCOPE) == "turn:resp_1"


def test_another_tenant_or_upstream_reads_nothing() -> None:
    token = TOKENS.mint(SCOPE, "turn:resp_1")
    assert TOKENS.read(token, "tenant-b:upstream-1:") is None
    assert TOKENS.read(token, "tenant-a:upstream-2:") is None


def test_every_tampered_byte_reads_nothing() -> None:
    token = TOKENS.mint(SCOPE, "turn:resp_1")
    for position in range(len(token)):
        swapped = "A" if token[position] != "A" else "B"
        tampered = token[:position] + swapped + token[position + 1 :]
        assert TOKENS.read(tampered, SCOPE) is None, position


def test_another_secret_reads_nothing() -> None:
    token = TOKENS.mint(SCOPE, "turn:resp_1")
    assert ReceiptTokens(b"other").read(token, SCOPE) is None


def test_another_version_reads_nothing() -> None:
    token = TOKENS.mint(SCOPE, "turn:resp_1")
    assert TOKENS.read("sf2" + token[3:], SCOPE) is None


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "sf1",
        "sf1..",
        "sf1.abc.def",
        "gAAAAABo-openai-encrypted",
        "sf1.%%%.###",
        "x" * 10_000,
        "sf1.\udcff.\udcff",
    ],
)
def test_garbage_reads_nothing(garbage: str) -> None:
    assert TOKENS.read(garbage, SCOPE) is None


def test_a_valid_mac_over_a_non_json_payload_reads_nothing() -> None:
    body = "sf1." + receipt_tokens._b64(b"not json")
    token = body + "." + receipt_tokens._b64(TOKENS._mac(body))
    assert TOKENS.read(token, SCOPE) is None


def test_the_secret_comes_from_the_environment() -> None:
    shared = {"STREAMFIX_RECEIPT_SECRET": "s3cret"}
    token = tokens_from_environ(shared).mint(SCOPE, "k")
    assert tokens_from_environ(shared).read(token, SCOPE) == "k"


def test_without_a_secret_each_process_draws_one_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "proxy.fronts.receipt_tokens"):
        first, second = tokens_from_environ({}), tokens_from_environ({})
    assert "STREAMFIX_RECEIPT_SECRET" in caplog.text
    assert second.read(first.mint(SCOPE, "k"), SCOPE) is None


def test_the_module_functions_round_trip() -> None:
    assert receipt_tokens.read(receipt_tokens.mint(SCOPE, "k"), SCOPE) == "k"
