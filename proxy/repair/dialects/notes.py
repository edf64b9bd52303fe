"""A constraint an upstream cannot take as a keyword, written as text the model still reads.

The model sees a tool's schema, not the validator's verdict: "must be greater than 0" in the
description keeps the meaning of `exclusiveMinimum: 0` for an upstream that rejects the keyword.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _extra(value: Any) -> str:
    if value is False:
        return "no properties other than those listed"
    if value is True:
        return "other properties are allowed"
    return f"any other property must be {_json(value)}"


def _names(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"pattern"}:
        return f"property names must match the regular expression {value['pattern']}"
    return f"property names must be {_json(value)}"


def _one_of(values: Any) -> str:
    if isinstance(values, list):
        return "must be one of: " + ", ".join(_json(value) for value in values)
    return f"must be one of {_json(values)}"


_PHRASES: dict[str, Callable[[Any], str]] = {
    "exclusiveMinimum": lambda v: f"must be greater than {_json(v)}",
    "exclusiveMaximum": lambda v: f"must be less than {_json(v)}",
    "minimum": lambda v: f"must be at least {_json(v)}",
    "maximum": lambda v: f"must be at most {_json(v)}",
    "multipleOf": lambda v: f"must be a multiple of {_json(v)}",
    "minLength": lambda v: f"at least {_json(v)} characters",
    "maxLength": lambda v: f"at most {_json(v)} characters",
    "pattern": lambda v: f"must match the regular expression {v}",
    "format": lambda v: f"format: {v}",
    "const": lambda v: f"must be exactly {_json(v)}",
    "enum": _one_of,
    "default": lambda v: f"default: {_json(v)}",
    "examples": lambda v: f"examples: {_json(v)}",
    "uniqueItems": lambda v: "items must be unique" if v is True else "items may repeat",
    "minItems": lambda v: f"at least {_json(v)} items",
    "maxItems": lambda v: f"at most {_json(v)} items",
    "minProperties": lambda v: f"at least {_json(v)} properties",
    "maxProperties": lambda v: f"at most {_json(v)} properties",
    "additionalProperties": _extra,
    "propertyNames": _names,
    "patternProperties": lambda v: f"properties whose names match a pattern: {_json(v)}",
    "prefixItems": lambda v: f"a tuple: the items in order are {_json(v)}",
    "deprecated": lambda v: "deprecated" if v is True else "not deprecated",
}


def phrase(keyword: str, value: Any) -> str:
    """The constraint in words; a keyword without a phrase is written as `keyword: value`."""
    spell = _PHRASES.get(keyword)
    return spell(value) if spell is not None else f"{keyword}: {_json(value)}"


def with_notes(description: Any, notes: list[str]) -> str:
    """The description with the notes after it, in parentheses; the notes alone if none."""
    text = "; ".join(notes)
    if isinstance(description, str) and description.strip():
        return f"{description.rstrip()} ({text})"
    return text
