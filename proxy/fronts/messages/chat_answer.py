"""What a chat answer says, in Messages' terms: its reasoning text, its stop reason, its
usage, its error's words."""

from __future__ import annotations

from typing import Any

from proxy.wire.error_bodies import error_fields


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


def usage_of(usage: Any) -> dict[str, int]:
    """Anthropic's usage from a chat usage object (zeros where the upstream said nothing)."""
    out = {"input_tokens": 0, "output_tokens": 0}
    if not isinstance(usage, dict):
        return out
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    out["input_tokens"] = max(_count(usage.get("prompt_tokens")) - cached, 0)
    out["output_tokens"] = _count(usage.get("completion_tokens"))
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


def _count(value: Any) -> int:
    """A token count: a non-negative integer, else 0 (the upstream said nothing usable)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def error_message(body: Any) -> str:
    """The upstream's own words for its error, whatever its shape (wire/error_bodies.py)."""
    return error_fields(body).message or "the upstream reported an error"
