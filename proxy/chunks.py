"""Small facts about chat-completion chunks that several repairs need."""

from __future__ import annotations

from typing import Any

# Top-level fields that identify a stream; copied onto chunks the proxy creates.
_ENVELOPE_FIELDS = ("id", "object", "created", "model", "system_fingerprint")


def envelope(chunk: dict[str, Any]) -> dict[str, Any]:
    """The identifying fields of `chunk`, without choices or usage."""
    return {key: chunk[key] for key in _ENVELOPE_FIELDS if key in chunk}


def new_chunk(template: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    """A chunk in the same stream as `template` carrying one choice."""
    chunk = dict(template)
    chunk.setdefault("object", "chat.completion.chunk")
    chunk["choices"] = [choice]
    return chunk


def choices_of(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    choices = chunk.get("choices")
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def choice_index(choice: dict[str, Any]) -> int:
    index = choice.get("index", 0)
    return index if isinstance(index, int) else 0
