"""What an upstream's error body says, for a door to say it again in its own shape: one reader
for every door (the refusal rules read every message a body holds: upstream/error_messages.py).

The shapes: OpenAI's `{"error": {"message", "type", "code", "param"}}` (vLLM, Groq, DeepSeek,
Kimi); Google's, the same object in a JSON array, with its `status` beside the numeric code;
LM Studio's `{"error": "…"}`; vLLM's older `{"object": "error", "message": …}`; a body that is
not JSON, its text (cut to 500 characters).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.wire import json_codec

TEXT_CHARS = 500
"""How much of an error that is not JSON is said again."""


@dataclass(frozen=True, slots=True)
class ErrorFields:
    """The upstream's own words for its error; None where it said nothing."""

    message: str | None = None
    code: str | None = None
    type: str | None = None
    param: Any = None


def read_error(raw: bytes) -> ErrorFields:
    """The fields of an error body as read (bounded by the caller)."""
    if not raw:
        return ErrorFields()
    try:
        document: Any = json_codec.loads(raw)
    except json_codec.JSONDecodeError:
        document = raw.decode("utf-8", "replace")
    return error_fields(document)


def error_fields(document: Any) -> ErrorFields:
    """The fields of an error that was already decoded (an in-band error chunk, a body)."""
    if isinstance(document, list) and document and isinstance(document[0], dict):
        document = document[0]  # Google's endpoints answer errors in a list
    if isinstance(document, str):
        return ErrorFields(document[:TEXT_CHARS] or None)
    if not isinstance(document, dict):
        return ErrorFields()
    inner = document.get("error")
    if isinstance(inner, dict):
        code = inner.get("code") or inner.get("status")  # Google's: 400 and INVALID_ARGUMENT
        return ErrorFields(
            _text(inner.get("message")), _text(code), _text(inner.get("type")), inner.get("param")
        )
    if isinstance(inner, str) and inner:
        return ErrorFields(inner)
    return ErrorFields(_text(document.get("message")))


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)
