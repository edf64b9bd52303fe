"""Where two JSON values differ, field by field."""

from __future__ import annotations

from typing import Any

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
"""The absent side of a field that was added or removed."""

Change = tuple[str, Any, Any]
"""(path, before, after), e.g. `("choices[0].finish_reason", "stop", "tool_calls")`."""


def field_changes(before: Any, after: Any, path: str = "") -> list[Change]:
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[Change] = []
        for key in [*before, *(k for k in after if k not in before)]:
            where = f"{path}.{key}" if path else str(key)
            changes += field_changes(before.get(key, MISSING), after.get(key, MISSING), where)
        return changes
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        changes = []
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            changes += field_changes(old, new, f"{path}[{index}]")
        return changes
    return [] if before == after else [(path or ".", before, after)]


def closest_changes(before: Any, candidates: list[Any]) -> list[Change]:
    """The changes from `before` to the candidate it became: the one least changed (a repair
    that split an event also sent it on, the rest are events it released)."""
    options = [field_changes(before, candidate) for candidate in candidates]
    return min(options, key=len) if options else []


def change_json(change: Change) -> dict[str, Any]:
    path, before, after = change
    out: dict[str, Any] = {"path": path}
    if before is not MISSING:
        out["before"] = before
    if after is not MISSING:
        out["after"] = after
    return out
