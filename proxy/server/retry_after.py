"""The one wait-and-resend of a request the upstream answered 429 with a `Retry-After` the
proxy can wait out: nothing was generated, and the upstream said when to come back.

The wait is bounded three ways: by the route's `retry_after_max_seconds` (0: never), by the
client's own read timeout when its SDK declares it (`x-stainless-read-timeout`, sent by
openai-python, anthropic-python and the TypeScript SDKs Claude Code and Codex are built on), so
the proxy never outwaits the client it waits for, and by the client itself: one that leaves
ends the wait, and nothing is sent again.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
from collections.abc import Mapping
from datetime import UTC

from starlette.types import Receive

RATE_LIMITED = 429
CLIENT_READ_TIMEOUT = "x-stainless-read-timeout"
"""The seconds a Stainless-built SDK waits for the first byte, as it tells the server."""


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """`Retry-After` as seconds from `now` (a Unix time): delay-seconds, or an HTTP date
    (RFC 9110 §10.2.3); a date already past is 0. None when absent or unreadable. Decimal
    seconds are read too, as the SDKs read them."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": an HTTP date is GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def patience(headers: Mapping[str, str]) -> float | None:
    """The client's read timeout in seconds, when its SDK says it."""
    try:
        seconds = float(headers.get(CLIENT_READ_TIMEOUT, ""))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def wait_to_allow(delay: float | None, bound: float, elapsed: float, client: float | None) -> bool:
    """Whether a `delay` the upstream asked for is waited out: within the bound, and over
    before the client's own read timeout runs out (`elapsed` already went by)."""
    if delay is None or bound <= 0 or delay > bound:
        return False
    return client is None or elapsed + delay < client


async def client_stays(receive: Receive, seconds: float) -> bool:
    """True once `seconds` passed with the client still there; False the moment it leaves.
    The request body is read already, so the next message is the client's disconnect."""
    watch = asyncio.ensure_future(_until_disconnect(receive))
    try:
        done, _ = await asyncio.wait({watch}, timeout=seconds)
    finally:
        watch.cancel()
    if done:
        watch.exception()  # a receive that failed is a client gone too; retrieved, not raised
    return not done


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
