"""Anthropic's prompt-cache marks (`cache_control`) carried onto the chat request where chat
upstreams that cache take them: OpenRouter (for Anthropic and Gemini models) and the gateways
like it read the same object on a content part, on a `tool` or assistant message, and on a
tool definition (its prompt-caching guide, and its AI SDK provider's
convert-to-openrouter-chat-messages.ts). An upstream that refuses them has them dropped, or
only their `ttl` (proxy/repair/repairs/cache_control.py, learned from its refusal)."""

from __future__ import annotations

from typing import Any

MARK = "cache_control"


def mark_of(block: dict[str, Any]) -> dict[str, Any] | None:
    """The block's mark as the client wrote it (`{"type": "ephemeral", "ttl": "1h"}`), or None:
    anything but an object is no mark."""
    mark = block.get(MARK)
    return mark if isinstance(mark, dict) else None


def marked(part: dict[str, Any], mark: dict[str, Any] | None) -> dict[str, Any]:
    """`part` with the mark on it, when there is one."""
    if mark is not None:
        part[MARK] = mark
    return part
