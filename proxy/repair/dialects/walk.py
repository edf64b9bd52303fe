"""Where a JSON Schema node keeps its subschemas, so a walk never mistakes data for a schema.

A property may be named `type` or `$ref`: inside `properties` the keys are names, not
keywords. Only the values at these keywords are schemas; `enum`, `const`, `default` and
`examples` hold data and are never walked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Schema = dict[str, Any]

ONE = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contains",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
    }
)
"""A keyword whose value is one schema (or a boolean, which is no node to walk)."""
LIST = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
"""A keyword whose value is a list of schemas (`items` too, in drafts before 2020-12)."""
MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
"""A keyword whose value maps names to schemas."""


def map_children(node: Schema, rewrite: Callable[[Any], Any]) -> Schema:
    """`node` with `rewrite` applied to each direct subschema: the same object when every
    subschema came back as the same object, else a shallow copy holding the new ones."""
    out: Schema | None = None
    for key, value in node.items():
        new = _map_value(key, value, rewrite)
        if new is not value:
            if out is None:
                out = dict(node)
            out[key] = new
    return node if out is None else out


def _map_value(key: str, value: Any, rewrite: Callable[[Any], Any]) -> Any:
    if key in MAP and isinstance(value, dict):
        return _map_dict(value, rewrite)
    if (key in LIST or key == "items") and isinstance(value, list):
        items = [rewrite(item) if isinstance(item, dict) else item for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if key in ONE and isinstance(value, dict):
        return rewrite(value)
    return value


def _map_dict(value: dict[str, Any], rewrite: Callable[[Any], Any]) -> dict[str, Any]:
    out: dict[str, Any] | None = None
    for name, sub in value.items():
        new = rewrite(sub) if isinstance(sub, dict) else sub
        if new is not sub:
            if out is None:
                out = dict(value)
            out[name] = new
    return value if out is None else out
