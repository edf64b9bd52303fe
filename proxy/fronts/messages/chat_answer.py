"""What a chat answer says, in Messages' terms: its reasoning text, its stop reason, its
usage, its error's words."""

from __future__ import annotations

from typing import Any

from proxy.wire.error_bodies import error_fields
from proxy.wire.json_shapes import integer


def reasoning_text(delta: dict[str, Any]) -> str | None:
    """The reasoning a delta carries, or None. OpenRouter sends the same text in `reasoning`
    and `reasoning_details`: one field is read, in this order, never two."""
    for name in ("reasoning_content", "reasoning"):
        value = delta.get(name)
        if isinstance(value, str) and value:
            return value
    details = delta.get("reasoning_details")
    if isinstance(details, list) and details:
        pieces = []
        for detail in details:
            if isinstance(detail, dict):
                for name in ("text", "summary"):
                    if isinstance(detail.get(name), str):
                        pieces.append(detail[name])
        return "".join(pieces)  # "" for encrypted-only details: a block still carries them
    return None


def stop_reason(finish: Any, called: bool, matched: Any, stops: list[str]) -> tuple[str, Any]:
    """(stop_reason, stop_sequence) for a chat finish: `tool_use` whenever a call went out,
    `max_tokens` for `length`, `refusal` for `content_filter`, `stop_sequence` when the
    upstream named which one matched (vLLM's `stop_reason`), else `end_turn`."""
    if called:
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    if finish == "content_filter":
        return "refusal", None
    if isinstance(matched, str) and matched in stops:
        return "stop_sequence", matched
    return "end_turn", None


CACHE_READ: tuple[tuple[str, ...], ...] = (
    ("prompt_tokens_details", "cached_tokens"),  # OpenAI, OpenRouter, xAI, Gemini's compat
    ("cached_tokens",),  # Moonshot
    ("prompt_cache_hit_tokens",),  # DeepSeek
)
"""Where a chat usage says how much of the prompt its cache served, first found first."""
CACHE_WRITE: tuple[tuple[str, ...], ...] = (
    ("prompt_tokens_details", "cache_write_tokens"),  # OpenRouter
    ("cache_creation_input_tokens",),  # gateways that speak Anthropic's name for it
)
"""Where a chat usage says how much of the prompt went into its cache."""


def usage_of(usage: Any) -> dict[str, int]:
    """Anthropic's usage from a chat usage object, as much as it reported: `input_tokens`
    (the prompt less what the cache served or took, which Anthropic counts apart) only when
    it reported `prompt_tokens`, `output_tokens` always (0 when it said nothing: Anthropic's
    usage requires it), the cache's two counts when not 0. Their sum is the prompt, as Claude
    Code's context meter adds them."""
    if not isinstance(usage, dict):
        return {"output_tokens": 0}
    out: dict[str, int] = {}
    read, written = _first(usage, CACHE_READ), _first(usage, CACHE_WRITE)
    prompt = integer(usage.get("prompt_tokens"))
    if prompt is not None and prompt >= 0:
        out["input_tokens"] = max(prompt - read - written, 0)
    if written:
        out["cache_creation_input_tokens"] = written
    if read:
        out["cache_read_input_tokens"] = read
    out["output_tokens"] = _count(usage.get("completion_tokens"))  # Anthropic's order
    return out


def _first(usage: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> int:
    """The first positive count at one of `paths`, else 0."""
    for path in paths:
        value: Any = usage
        for name in path:
            value = value.get(name) if isinstance(value, dict) else None
        if _count(value):
            return _count(value)
    return 0


def _count(value: Any) -> int:
    """A token count: a non-negative integer, else 0 (the upstream said nothing usable)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def error_message(body: Any) -> str:
    """The upstream's own words for its error, whatever its shape (wire/error_bodies.py)."""
    return error_fields(body).message or "the upstream reported an error"
