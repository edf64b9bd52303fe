"""Reading JSON that an upstream or client may have shaped wrongly, the same way everywhere."""

from __future__ import annotations

from typing import Any


def objects_in(value: Any) -> list[dict[str, Any]]:
    """The objects of what should be an array of objects (`choices`, `tool_calls`,
    `messages`): nothing when it is absent or not an array, and without its non-objects."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def integer(value: Any) -> int | None:
    """A JSON integer, or None. Python's `True` is an int, and `"index": true` is not index 1."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
