"""Small facts about chat-completion chunks that several repairs need."""

from __future__ import annotations

from typing import Any

from proxy.wire.json_shapes import integer, objects_in

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
    return objects_in(chunk.get("choices"))


def choice_index(choice: dict[str, Any]) -> int:
    index = integer(choice.get("index", 0))
    return 0 if index is None else index


def without_empty_choices(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    """`chunk` without the choices a repair emptied (no delta left, no finish, nothing else);
    no chunk at all when nothing is left to say. A repair that takes something out of a delta
    returns this, so the client does not get a stream of `"delta": {}` shells."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return [chunk]
    kept = [c for c in choices if not _is_empty_choice(c)]
    if len(kept) == len(choices):
        return [chunk]
    chunk["choices"] = kept
    if kept or chunk.get("usage"):
        return [chunk]
    return []


def says_nothing(chunk: dict[str, Any]) -> bool:
    """Only identity and choices with empty deltas: no content, finish, usage or anything else
    a client could read. Such a chunk can go without the client missing anything."""
    choices = chunk.get("choices")
    return (
        isinstance(choices, list)
        and bool(choices)
        and all(_is_empty_choice(c) for c in choices)
        and set(chunk) <= {*_ENVELOPE_FIELDS, "choices"}
    )


def _is_empty_choice(choice: Any) -> bool:
    if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
        return False
    if set(choice) - {"index", "delta", "finish_reason", "logprobs"}:
        return False
    delta = choice.get("delta")
    return isinstance(delta, dict) and not delta and choice.get("logprobs") is None
