"""Reading and writing a nested field of a JSON object by its path of keys."""

from __future__ import annotations

from typing import Any

Path = tuple[str, ...]


def get_path(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def set_path(obj: dict[str, Any], path: Path, value: Any, replace: bool = False) -> bool:
    """Set `path` unless something is already there (or whatever is there, with `replace`);
    True when it was set."""
    for key in path[:-1]:
        child = obj.get(key)
        if child is None:
            child = obj[key] = {}
        elif not isinstance(child, dict):
            return False
        obj = child
    if not replace and obj.get(path[-1]) not in (None, "", []):
        return False
    obj[path[-1]] = value
    return True


def remove_path(obj: Any, path: Path) -> bool:
    """Remove `path`, and the objects it leaves empty; True when something was removed."""
    if not isinstance(obj, dict) or path[0] not in obj:
        return False
    if len(path) == 1:
        del obj[path[0]]
        return True
    child = obj[path[0]]
    removed = remove_path(child, path[1:])
    if removed and child == {}:
        del obj[path[0]]
    return removed
