"""Client paths: normalised once before routing, forwarded as the client's bytes, kept inside
the upstream's base path.

The path is never decoded on its way upstream: the client's `a%2Fb`, `%252e` or `%ff` reach the
upstream exactly as sent, so nothing the proxy decodes can turn into a `?`, a `#` or a `..`
there. It is decoded only to be checked and routed.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

_SLASHES = re.compile(rb"//+")
# Some stacks behind an upstream decode a path more than once: refuse a segment that any of the
# first few decodings turns into `.` or `..`.
_DECODINGS = 3
# Where a decoded segment could end for such a stack: a `..%3F` is `..` followed by a query.
_SEPARATORS = re.compile(r"[/\\?#;]")


class UnsafePath(ValueError):
    """A client path that would climb out of the upstream's base path (`../`, `%2e%2e`)."""


def normalised(raw_path: bytes) -> bytes:
    """One spelling per route: repeated slashes collapsed, a trailing slash dropped, so that
    `/v1//chat/completions` and `/v1/chat/completions/` are the chat route, repairs included."""
    normal = raw_path
    if b"//" in normal:
        normal = _SLASHES.sub(b"/", normal)
    if len(normal) > 1 and normal.endswith(b"/"):
        normal = normal.rstrip(b"/") or b"/"
    return normal  # `raw_path` itself when nothing changed


def decoded(raw_path: bytes) -> str:
    """The path as ASGI servers decode it (percent-decoded once, UTF-8), for routing only."""
    return unquote(raw_path.decode("latin-1"))


def checked_relative(raw_relative: bytes) -> bytes:
    """`raw_relative` (what follows the client's `/v1/`) when it stays inside the base path."""
    for segment in raw_relative.split(b"/"):
        text = segment.decode("latin-1")
        for _ in range(_DECODINGS):
            parts = _SEPARATORS.split(text)
            if any(part in (".", "..") for part in parts):
                raise UnsafePath(f"path segments '.' and '..' are not allowed: {raw_relative!r}")
            if "%" not in text:
                break
            text = unquote(text, encoding="latin-1")
    return raw_relative
