"""Tool-call ids the proxy has to make up."""

from __future__ import annotations

import hashlib


def generated_call_id(*seed: object) -> str:
    """`call_<24 hex>` derived from `seed`: replaying an exchange gives the same id."""
    return f"call_{id_digest(*seed)[:24]}"


def id_digest(*seed: object) -> str:
    """A hex digest of `seed`, for ids of other shapes (proxy/repair/markup/spans.py)."""
    return hashlib.sha256("\x1f".join(map(str, seed)).encode()).hexdigest()
