"""Limits the proxy enforces on what an upstream sends, and the one error they raise.

Each limit ends only the exchange that crossed it, with a clear error for its client: a hostile
or broken upstream can fail its own exchange, never the process.
"""

from __future__ import annotations


class LimitExceeded(ValueError):
    """Something the upstream sent grew past a configured bound. `code` is the OpenAI-style
    error code the client gets; repairs let it through (it is no bug of theirs to absorb)."""

    code = "response_too_large"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
