"""A client's value as a front's refusal names it: short, whatever was sent.

A refusal names the value it refuses so the client can see the cause, but a 70 kB string or an
object of a megabyte repeated back would make the error larger than the request; a string is
cut, an object or array named by its kind."""

from __future__ import annotations

from typing import Any

QUOTED_CHARS = 60
"""How much of a string a refusal repeats."""


def quoted(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= QUOTED_CHARS else repr(value[:QUOTED_CHARS]) + "…"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return repr(value)  # null, a boolean or a number: short (JSON numbers stop near 1e308)
