"""How a failure to reach or read the upstream reads to the client."""

from __future__ import annotations

import httpx


def describe_failure(exc: Exception) -> tuple[int, str, str]:
    """HTTP status, message and error code for a failure to reach or read the upstream."""
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return 504, "upstream connect timed out", "upstream_timeout"
    if isinstance(exc, httpx.TimeoutException):
        return 504, "upstream read timed out", "upstream_timeout"
    if isinstance(exc, httpx.ConnectError):
        return 502, "could not connect to the upstream", "upstream_unreachable"
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        # The own client's failures say what the upstream did (a head past its limit, a close
        # without an answer and whether the request was sent again) and carry no request data.
        return 502, str(exc), code
    return 502, f"upstream connection failed: {type(exc).__name__}", "upstream_failed"
