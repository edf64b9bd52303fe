"""Reading `Retry-After` and deciding a wait (proxy/server/retry_after.py)."""

from __future__ import annotations

import email.utils

import pytest

from proxy.server.retry_after import patience, retry_after_seconds, wait_to_allow

NOW = 1_750_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1", 1.0),
        (" 30 ", 30.0),
        ("0", 0.0),
        ("1.5", 1.5),  # not RFC 9110's, but the SDKs read it
        (email.utils.formatdate(NOW + 7, usegmt=True), 7.0),
        (email.utils.formatdate(NOW - 60, usegmt=True), 0.0),  # a date past: now
        (None, None),
        ("", None),
        ("soon", None),
        ("-3", None),
        ("inf", None),
        ("nan", None),
    ],
)
def test_retry_after_as_seconds(value: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(value, NOW) == seconds


def test_the_wait_is_bounded_by_the_route_and_by_the_client() -> None:
    assert wait_to_allow(1.0, 10.0, 0.0, None)
    assert not wait_to_allow(None, 10.0, 0.0, None)
    assert not wait_to_allow(11.0, 10.0, 0.0, None)
    assert not wait_to_allow(1.0, 0.0, 0.0, None)  # 0: off
    assert wait_to_allow(1.0, 10.0, 0.5, 600.0)
    assert not wait_to_allow(1.0, 10.0, 0.5, 1.5)  # the client would be gone by then


def test_the_clients_patience_is_read_from_its_sdk() -> None:
    assert patience({"x-stainless-read-timeout": "600"}) == 600.0
    assert patience({"x-stainless-read-timeout": "nope"}) is None
    assert patience({}) is None
