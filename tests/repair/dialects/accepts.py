"""What each upstream accepts of a tool schema, written from its documentation and its quoted
errors (independently of the rewrite's own tables), and the property paths of a schema."""

from __future__ import annotations

from typing import Any

# Google's `Schema` message (v1beta; @google-ai/generativelanguage ISchema): every field it has.
# `default` is left out: reported as "Unknown name" (litellm#6459), so the rewrite never sends it.
GEMINI_FIELDS = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "example",
    "items",
    "minItems",
    "maxItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "propertyOrdering",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "anyOf",
}
GEMINI_TYPES = {"string", "number", "integer", "boolean", "array", "object"}
# "for NUMBER type: float, double for INTEGER type: int32, int64 for STRING type: enum,
# date-time" (the discovery document's `Schema.format`).
GEMINI_FORMATS = {
    "number": {"float", "double"},
    "integer": {"int32", "int64"},
    "string": {"enum", "date-time"},
}


def gemini_violations(schema: Any, at: str = "parameters") -> list[str]:
    """Gemini's error for each thing in `schema` it rejects, worded as its 400 bodies are
    quoted (openswarm#24, zed#44875, CLIProxyAPI#129, langchain-mcp-tools-ts#36)."""
    if not isinstance(schema, dict):
        return [f"Invalid value at '{at}': not a Schema"]
    errors: list[str] = []
    for key in schema:
        if key not in GEMINI_FIELDS:
            errors.append(
                f"Invalid JSON payload received. Unknown name \"{key}\" at '{at}': "
                "Cannot find field."
            )
    kind = schema.get("type")
    if isinstance(kind, list):
        errors.append(
            f"Invalid JSON payload received. Unknown name \"type\" at '{at}': "
            "Proto field is not repeating, cannot start list."
        )
    elif kind is not None and kind not in GEMINI_TYPES:
        errors.append(f"Invalid value at '{at}.type' (type.googleapis.com/Type), \"{kind}\"")
    for index, value in enumerate(schema.get("enum") or []):
        if not isinstance(value, str):
            errors.append(f"Invalid value at '{at}.enum[{index}]' (TYPE_STRING), {value}")
    fmt = schema.get("format")
    if fmt is not None and fmt not in GEMINI_FORMATS.get(kind if isinstance(kind, str) else "", ()):
        errors.append(f"{at}.format: only 'enum' and 'date-time' are supported for STRING type")
    for index, (name, sub) in enumerate((schema.get("properties") or {}).items()):
        del name
        errors += gemini_violations(sub, f"{at}.properties[{index}].value")
    if "items" in schema:
        errors += gemini_violations(schema["items"], f"{at}.items")
    for index, sub in enumerate(schema.get("anyOf") or []):
        errors += gemini_violations(sub, f"{at}.any_of[{index}]")
    return errors


def moonshot_violations(schema: Any, path: str = "root", root: bool = True) -> list[str]:
    """Moonshot's error for each node it rejects (kimi-cli#1595, #2531, MiqroForge#1165)."""
    prefix = "tools.function.parameters is not a valid moonshot flavored json schema, details: "
    if not isinstance(schema, dict):
        return [f"{prefix}<At path '{path}': not a schema>"]
    errors: list[str] = []
    if root and "anyOf" not in schema and schema.get("type") != "object":
        errors.append('tools.function.parameters.type is required and must be "object"')
    if "anyOf" in schema and "type" in schema:
        errors.append(
            f"{prefix}<At path '{path}': when using anyOf, type should be defined in anyOf "
            "items instead of the parent schema>"
        )
    elif "anyOf" not in schema and "type" not in schema:
        errors.append(f"{prefix}<At path '{path}': type is not defined>")
    if "$ref" in schema:
        errors.append(f"{prefix}<At path '{path}.$ref': $defs not found for reference>")
    # Tuple `items` and conditionals are refused too (opencode#39995, #31580).
    if isinstance(schema.get("items"), list) or "prefixItems" in schema:
        errors.append(f"{prefix}<At path '{path}.items': tuple items are not supported>")
    for key in ("if", "then", "else"):
        if key in schema:
            errors.append(f"Conflict in schema definitions for key '{key}'")
    for name, sub in (schema.get("properties") or {}).items():
        errors += moonshot_violations(sub, f"{_join(path, 'properties')}.{name}", False)
    if isinstance(schema.get("items"), dict):
        errors += moonshot_violations(schema["items"], f"{_join(path, 'items')}", False)
    for sub in schema.get("anyOf") or []:
        errors += moonshot_violations(sub, _join(path, "anyOf"), False)
    return errors


def _join(path: str, key: str) -> str:
    return key if path == "root" else f"{path}.{key}"


def property_paths(schema: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every property path in `schema`: names through `properties`, `[]` through `items`
    (each position of a tuple too);
    `anyOf`, `oneOf` and `allOf` are looked through (they are where a value may be, not a
    level of it)."""
    paths: set[tuple[str, ...]] = set()
    if not isinstance(schema, dict):
        return paths
    for name, sub in (schema.get("properties") or {}).items():
        paths.add((*prefix, name))
        paths |= property_paths(sub, (*prefix, name))
    items = schema.get("items")
    for sub in [items] if isinstance(items, dict) else items if isinstance(items, list) else []:
        paths |= property_paths(sub, (*prefix, "[]"))
    for sub in schema.get("prefixItems") or []:
        paths |= property_paths(sub, (*prefix, "[]"))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            paths |= property_paths(sub, prefix)
    return paths
