"""Tool-call ids the proxy has to make up."""

from __future__ import annotations

import hashlib


def generated_call_id(*seed: object) -> str:
    """`call_<24 hex>` derived from `seed`: replaying an exchange gives the same id."""
    digest = hashlib.sha256("\x1f".join(map(str, seed)).encode()).hexdigest()
    return f"call_{digest[:24]}"
