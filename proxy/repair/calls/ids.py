"""Tool-call ids the proxy has to make up."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection

NUMBERED_ID = re.compile(r"functions\.(?P<name>[A-Za-z0-9_.-]+):(?P<n>\d+)")
"""Kimi's shape, `functions.NAME:N`: its chat template carries the function's name only in the
id, and N counts the calls of the conversation."""


def generated_call_id(*seed: object) -> str:
    """`call_<24 hex>` derived from `seed`: replaying an exchange gives the same id."""
    return f"call_{id_digest(*seed)[:24]}"


def id_digest(*seed: object) -> str:
    """A hex digest of `seed`, for ids of other shapes (proxy/repair/markup/spans.py)."""
    return hashlib.sha256("\x1f".join(map(str, seed)).encode()).hexdigest()


def next_numbered_id(original: str, taken: Collection[str]) -> str | None:
    """For an id in Kimi's shape, the same name with the next N no id of `taken` has (one past
    the highest N in the conversation, whatever its name); None for an id of another shape.
    A `call_<hex>` in its place is read by Kimi's template as a call of no function, and the
    model then writes ids of the wrong shape that its server's parser rejects (exo#2281)."""
    match = NUMBERED_ID.fullmatch(original)
    if match is None:
        return None
    numbers = [int(m["n"]) for m in map(NUMBERED_ID.fullmatch, taken) if m]
    return f"functions.{match['name']}:{max(numbers, default=-1) + 1}"
