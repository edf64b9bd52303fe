"""A non-streamed chat completion as the one chunk that says all of it (its message, finish and
usage): what the Responses events translator is fed for a whole answer (events.py `whole`), so
a whole answer and a streamed one cannot come out different."""

from __future__ import annotations

from typing import Any

Chunk = dict[str, Any]


def completion_chunk(completion: dict[str, Any]) -> Chunk:
    """A whole chat completion as the one chunk that says all of it."""
    choices = completion.get("choices")
    return {
        "choices": [
            {
                "index": choice.get("index", 0),
                "delta": _as_delta(choice.get("message")),
                "finish_reason": choice.get("finish_reason"),
            }
            for choice in (choices if isinstance(choices, list) else ())
            if isinstance(choice, dict)
        ],
        "usage": completion.get("usage"),
    }


def _as_delta(message: Any) -> dict[str, Any]:
    """A choice's message as a delta; anything but an object says nothing."""
    delta = dict(message) if isinstance(message, dict) else {}
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [
            {**call, "index": position}
            for position, call in enumerate(calls)
            if isinstance(call, dict)
        ]
    return delta
