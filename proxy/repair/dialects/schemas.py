"""Tool schemas rewritten into the dialect of JSON Schema one upstream accepts.

`rewrite_schema(schema, dialect)` returns the rewritten schema, a new object (the input is
never changed), and the kinds of change it made, one entry per change. A schema the dialect
already accepts comes back as the very same object with no kinds, so a request that needs
nothing goes upstream byte for byte. No property is ever dropped, and no constraint silently:
what the dialect cannot say as a keyword goes into the node's description, where the model
still reads it. Only keywords with no meaning for the model (`$schema`, `$id`, `$comment`,
`x-*`) are removed.

The dialects are data (`DIALECTS`): which keywords a node may carry, and which rewrites apply.

Gemini (`gemini`: the OpenAI-compatible endpoint and Vertex both build Google's `Schema`, "a
select subset of an OpenAPI 3.0 schema object", from `parameters`):
  - A keyword outside `Schema`'s fields fails the whole request: `Invalid JSON payload
    received. Unknown name "additionalProperties" at 'tools[0].function_declarations[0]
    .parameters': Cannot find field.` Quoted for `$schema`, `additionalProperties`,
    `propertyNames` (openswarm#24, CLIProxyAPI#97), `const` (zed#44875), `exclusiveMinimum`
    (Mirrowel/LLM-API-Key-Proxy#86), `$ref`/`definitions` (zed#30188), `examples`, `default`
    (astra-assistants-api#73, litellm#6459). The accepted fields are those of the v1beta
    `Schema` message (@google-ai/generativelanguage 3.7.0 `ISchema`).
  - `type` is one value: `"type": ["string", "null"]` gives `Unknown name "type" at
    '...properties[0].value': Proto field is not repeating, cannot start list.` (zed#44875,
    litellm#12031). Rewritten as the one type with `nullable: true`, or `anyOf`.
  - `enum` holds strings only (`Schema.enum` is `string[]`): `Invalid value at
    '...enum[0]' (TYPE_STRING), 1` (CLIProxyAPI#129). A string `const` becomes a one-value
    `enum`; other values go into the description.
  - `format` is limited by type ("for NUMBER type: float, double for INTEGER type: int32,
    int64 for STRING type: enum, date-time", Google's discovery document); others fail with
    `format: only 'enum' and 'date-time' are supported for STRING type`
    (langchain-mcp-tools-ts#36, litellm#6970).
  - `items` is one schema: a tuple becomes one `items` schema, its order in the description.
  - `anyOf` exists, `oneOf` and `allOf` do not: `oneOf` becomes `anyOf` (a model choosing a
    branch is no less right), `allOf` is merged into its node.
  - `default` is a field of the current `Schema` message but was rejected as unknown
    (litellm#6459) and is still stripped by clients (goai#108): it goes into the description.

Moonshot (`moonshot`, "Moonshot flavored JSON Schema", Kimi's API; kimi-cli#1595, #2531,
opencode#37496):
  - every node needs a `type`: `<At path 'properties.truncateMode': type is not defined>`;
    it is inferred from `properties` (object), `items` (array), or the values of `enum` and
    `const`; a node with none of these is left as it is and counted (`schema_type_unknown`);
  - a node with `anyOf` has no `type` of its own: `when using anyOf, type should be defined in
    anyOf items instead of the parent schema`; the parent's type moves into each branch that
    has none;
  - the root's `type` "is required and must be \"object\"" (MiqroForge-Desktop#1165);
  - `$ref`s are inlined: even a bare `$ref` is rejected (opencode#39995; refs.py has the
    other rejections quoted), and so are tuple `items` lists (opencode#39995): rewritten as
    for Gemini;
  - `if`/`then`/`else` are not accepted (opencode#31580): they go into the description;
  - `allOf` is merged here: Moonshot merges it itself and fails on what it cannot merge
    ("Conflict in schema definitions for key 'if'", pi#5822), and a node holding only `allOf`
    has no `type`; `oneOf` is checked like `anyOf` (root-level `oneOf` schemas fail with the
    `anyOf` message, FTShare-MCP#7) and becomes `anyOf`, so that rule covers it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.repair.dialects.kinds import (
    ALL_OF_MERGED_KIND,
    CONST_TO_ENUM_KIND,
    MOVED_TO_DESCRIPTION_KIND,
    NULL_TO_NULLABLE_KIND,
    ONE_OF_KIND,
    REMOVED_KIND,
    TUPLE_KIND,
    TYPE_ADDED_KIND,
    TYPE_ARRAY_KIND,
    TYPE_MOVED_INTO_ANY_OF_KIND,
    TYPE_UNKNOWN_KIND,
)
from proxy.repair.dialects.notes import phrase, with_notes
from proxy.repair.dialects.refs import inline_refs
from proxy.repair.dialects.walk import ONE, Schema, map_children


@dataclass(frozen=True, slots=True)
class Dialect:
    """What one upstream accepts in a tool schema, and the rewrites that bring one there."""

    name: str
    accepted: frozenset[str] | None = None
    """The keywords a node may carry; None: any. Others go into the description, except
    the meaningless ones, which are removed."""
    rejected: frozenset[str] = frozenset()
    """Keywords that go into the description even where `accepted` is None."""
    meaningless: frozenset[str] = frozenset()
    meaningless_prefixes: tuple[str, ...] = ()
    inline_refs: bool = False
    single_type: bool = False
    """`type` is one string and there is no "null" type: arrays and "null" are rewritten."""
    const_to_enum: bool = False
    string_enums_only: bool = False
    formats: Mapping[str, frozenset[str]] | None = None
    """The formats each type may carry; None: any."""
    one_of_to_any_of: bool = False
    merge_all_of: bool = False
    single_items: bool = False
    """`items` is one schema: a tuple (`items` as a list, `prefixItems`) is rewritten."""
    type_everywhere: bool = False
    no_type_beside_any_of: bool = False
    root_type: Literal["", "when_described", "always"] = ""
    """An untyped root becomes `"object"`: never, when it has properties, or always."""
    types: frozenset[str] = field(
        default=frozenset({"string", "number", "integer", "boolean", "array", "object"})
    )


GEMINI_ACCEPTED = frozenset(
    {
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
)

MEANINGLESS = frozenset({"$schema", "$id", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary"})

DIALECTS: dict[str, Dialect] = {
    "gemini": Dialect(
        "gemini",
        accepted=GEMINI_ACCEPTED,
        meaningless=MEANINGLESS,
        meaningless_prefixes=("x-",),
        inline_refs=True,
        single_type=True,
        const_to_enum=True,
        string_enums_only=True,
        formats={
            "string": frozenset({"enum", "date-time"}),
            "integer": frozenset({"int32", "int64"}),
            "number": frozenset({"float", "double"}),
        },
        one_of_to_any_of=True,
        merge_all_of=True,
        single_items=True,
        root_type="when_described",
    ),
    "moonshot": Dialect(
        "moonshot",
        inline_refs=True,
        rejected=frozenset({"if", "then", "else"}),
        one_of_to_any_of=True,
        merge_all_of=True,
        single_items=True,
        type_everywhere=True,
        no_type_beside_any_of=True,
        root_type="always",
    ),
}


def rewrite_schema(schema: Any, dialect: Dialect) -> tuple[Any, list[str]]:
    """`schema` in `dialect`, and the kinds of change made (one entry per change). The same
    object, with no kinds, when nothing needed a change; anything but an object is left."""
    if not isinstance(schema, dict):
        return schema, []
    kinds: list[str] = []
    out = inline_refs(schema, kinds) if dialect.inline_refs else schema
    return _Rewrite(dialect, kinds).node(out, root=True), kinds


Rule = Callable[[Schema, list[str], bool], bool]
"""Edits a node (a copy), may add notes for its description; says whether it changed it."""


class _Rewrite:
    """One pass over a schema, top-down: a node's own rules run before its subschemas are
    visited, so a type moved into `anyOf` branches is there when the branches are checked."""

    def __init__(self, dialect: Dialect, kinds: list[str]) -> None:
        self._dialect = dialect
        self._kinds = kinds
        self._rules = self._chosen_rules()

    def node(self, node: Schema, root: bool = False) -> Schema:
        out = dict(node)
        notes: list[str] = []
        changed = False
        for rule in self._rules:
            changed |= rule(out, notes, root)
        if notes:
            out["description"] = with_notes(out.get("description"), notes)
        mapped = map_children(out, self.node)
        if not changed and mapped is out:
            return node
        return mapped

    def _chosen_rules(self) -> list[Rule]:
        """The dialect's rules, in the order they must run: `allOf` and `oneOf` first (their
        branches bring keywords the later rules judge), the type rules last."""
        d = self._dialect
        rules: list[Rule] = []
        if d.merge_all_of:
            rules.append(self._merge_all_of)
        if d.one_of_to_any_of:
            rules.append(self._one_of)
        if d.single_items:
            rules.append(self._tuple)
        if d.single_type:
            rules.append(self._single_type)
        if d.const_to_enum:
            rules.append(self._const)
        if d.string_enums_only:
            rules.append(self._enums)
        if d.formats is not None:
            rules.append(self._format)
        if d.accepted is not None or d.rejected:
            rules.append(self._keywords)
        if d.no_type_beside_any_of:
            rules.append(self._type_into_any_of)
        if d.type_everywhere or d.root_type:
            rules.append(self._add_type)
        return rules

    # ── the rules: each edits `node` (a copy) and says whether it changed anything ────

    def _merge_all_of(self, node: Schema, notes: list[str], root: bool) -> bool:
        """Gemini has no `allOf`: its branches' keywords join the node. `properties` and
        `required` are unions; a property or subschema two branches define is both (an
        `allOf` of the two, merged in turn when it is visited), two `anyOf`s are every pair
        (up to `MAX_CROSSED` branches); for any other keyword the node's own value, then the
        first branch's, stands, and a different value from a later branch goes into the
        description."""
        branches = node.get("allOf")
        if not isinstance(branches, list) or not all(isinstance(b, dict) for b in branches):
            return False
        del node["allOf"]
        for branch in _flattened(branches):
            for key, value in branch.items():
                if key == "properties" and isinstance(value, dict):
                    node["properties"] = _joined(node.get("properties", {}), value)
                elif key == "required" and isinstance(value, list):
                    have = node.get("required", [])
                    node["required"] = [*have, *(name for name in value if name not in have)]
                elif key not in node:
                    node[key] = value
                elif node[key] == value or key == "description":
                    continue
                elif key in ONE and _subschema(node[key]) and _subschema(value):
                    node[key] = {"allOf": [_one_items(node[key]), _one_items(value)]}
                elif key == "anyOf" and _crossable(node[key], value):
                    # (a1 or a2) and (b1 or b2): each pair, as an `allOf` merged in its turn.
                    node[key] = [{"allOf": [a, b]} for a in node[key] for b in value]
                else:
                    notes.append(phrase(key, value))
        self._kinds.append(ALL_OF_MERGED_KIND)
        return True

    def _one_of(self, node: Schema, notes: list[str], root: bool) -> bool:
        if "oneOf" not in node:
            return False
        if "anyOf" not in node:
            node["anyOf"] = node.pop("oneOf")
        elif _crossable(node["anyOf"], node["oneOf"]):
            # Both hold: every pair of branches, as an `allOf` merged in its turn.
            one_of = node.pop("oneOf")
            node["anyOf"] = [{"allOf": [a, b]} for a in node["anyOf"] for b in one_of]
        else:
            return False  # `oneOf` is then written into the description
        self._kinds.append(ONE_OF_KIND)
        return True

    def _tuple(self, node: Schema, notes: list[str], root: bool) -> bool:
        """A tuple's positions become one `items` schema (their `anyOf` when they differ),
        and the order goes into the description."""
        items, prefix = node.get("items"), node.get("prefixItems")
        positions = items if isinstance(items, list) else prefix
        if not isinstance(positions, list) or not all(isinstance(p, dict) for p in positions):
            return False
        node.pop("prefixItems", None)
        rest = node.pop("items", None)
        branches = [*positions, *([rest] if isinstance(rest, dict) else [])]
        distinct = [b for i, b in enumerate(branches) if b not in branches[:i]]
        if distinct:
            node["items"] = distinct[0] if len(distinct) == 1 else {"anyOf": distinct}
        notes.append(phrase("prefixItems", positions))
        self._kinds.append(TUPLE_KIND)
        return True

    def _single_type(self, node: Schema, notes: list[str], root: bool) -> bool:
        changed = False
        kind = node.get("type")
        if isinstance(kind, list) and all(isinstance(t, str) for t in kind):
            types = list(dict.fromkeys(t for t in kind if t != "null"))
            del node["type"]
            if len(types) == 1:
                node["type"] = types[0]
            elif types and "anyOf" not in node:
                node["anyOf"] = [{"type": t} for t in types]
            elif types:
                notes.append(phrase("type", types))
            if "null" in kind:
                node["nullable"] = True
            self._kinds.append(TYPE_ARRAY_KIND)
            changed = True
        elif kind == "null":
            del node["type"]
            node["nullable"] = True
            self._kinds.append(NULL_TO_NULLABLE_KIND)
            changed = True
        branches = node.get("anyOf")
        if isinstance(branches, list) and any(_is_null(b) for b in branches):
            # `Optional[X]` as pydantic writes it: anyOf [X, {"type": "null"}].
            kept = [b for b in branches if not _is_null(b)]
            if kept:
                node["anyOf"] = kept
            else:
                del node["anyOf"]
            node["nullable"] = True
            self._kinds.append(NULL_TO_NULLABLE_KIND)
            changed = True
        return changed

    def _const(self, node: Schema, notes: list[str], root: bool) -> bool:
        """A string `const` is a one-value `enum`; another value is left for `_keywords`
        (it goes into the description: Gemini's enums are strings only)."""
        value = node.get("const")
        if not isinstance(value, str) or "enum" in node:
            return False
        del node["const"]
        node["enum"] = [value]
        node.setdefault("type", "string")
        self._kinds.append(CONST_TO_ENUM_KIND)
        return True

    def _enums(self, node: Schema, notes: list[str], root: bool) -> bool:
        values = node.get("enum")
        if not isinstance(values, list) or all(isinstance(v, str) for v in values):
            return False
        notes.append(phrase("enum", node.pop("enum")))
        self._kinds.append(MOVED_TO_DESCRIPTION_KIND)
        return True

    def _format(self, node: Schema, notes: list[str], root: bool) -> bool:
        value = node.get("format")
        if value is None:
            return False
        formats = self._dialect.formats or {}
        kind = node.get("type")
        if isinstance(kind, str) and value in formats.get(kind, frozenset()):
            return False
        notes.append(phrase("format", node.pop("format")))
        self._kinds.append(MOVED_TO_DESCRIPTION_KIND)
        return True

    def _keywords(self, node: Schema, notes: list[str], root: bool) -> bool:
        d = self._dialect
        changed = False
        for key in [k for k in node if k in d.rejected or not _accepted(d, k)]:
            value = node.pop(key)
            changed = True
            if key in d.meaningless or key.startswith(d.meaningless_prefixes):
                self._kinds.append(REMOVED_KIND)
            else:
                notes.append(phrase(key, value))
                self._kinds.append(MOVED_TO_DESCRIPTION_KIND)
        return changed

    def _type_into_any_of(self, node: Schema, notes: list[str], root: bool) -> bool:
        branches = node.get("anyOf")
        if not isinstance(branches, list) or "type" not in node:
            return False
        kind = node.pop("type")
        node["anyOf"] = [
            {"type": kind, **b} if isinstance(b, dict) and "type" not in b else b for b in branches
        ]
        self._kinds.append(TYPE_MOVED_INTO_ANY_OF_KIND)
        return True

    def _add_type(self, node: Schema, notes: list[str], root: bool) -> bool:
        if "type" in node or "anyOf" in node:
            return False  # with `anyOf`, the type belongs in the branches
        d = self._dialect
        if d.type_everywhere or (root and d.root_type == "always"):
            kind = _inferred_type(node)
            if kind is None and root and d.root_type == "always":
                kind = "object"
        elif root and d.root_type == "when_described":
            kind = "object" if "properties" in node else None
        else:
            return False
        if kind is None:
            if d.type_everywhere:
                self._kinds.append(TYPE_UNKNOWN_KIND)  # left as it is, and said
            return False
        node["type"] = kind
        self._kinds.append(TYPE_ADDED_KIND)
        return True


MAX_CROSSED = 32


def _crossable(have: Any, more: Any) -> bool:
    return (
        isinstance(have, list)
        and isinstance(more, list)
        and all(isinstance(b, dict) for b in [*have, *more])
        and len(have) * len(more) <= MAX_CROSSED
    )


def _accepted(dialect: Dialect, key: str) -> bool:
    return dialect.accepted is None or key in dialect.accepted


def _subschema(value: Any) -> bool:
    """A subschema, or a tuple of them (`items` as a list): what a merge can join."""
    return isinstance(value, dict) or (
        isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
    )


def _one_items(value: Any) -> Any:
    """A tuple's positions as one schema (their `anyOf`), so it can join another `items`: a
    tuple's properties must survive the merge like any other's."""
    if not isinstance(value, list):
        return value
    distinct = [v for i, v in enumerate(value) if v not in value[:i]]
    return distinct[0] if len(distinct) == 1 else {"anyOf": distinct}


def _flattened(branches: list[Schema]) -> list[Schema]:
    """`allOf` branches with their own `allOf`s spread out: all of them hold at once."""
    out: list[Schema] = []
    for branch in branches:
        inner = branch.get("allOf")
        if isinstance(inner, list) and all(isinstance(b, dict) for b in inner):
            out.append({key: value for key, value in branch.items() if key != "allOf"})
            out += _flattened(inner)
        else:
            out.append(branch)
    return out


def _joined(have: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Two `properties` maps as one; a name in both with different schemas holds both."""
    out = dict(have)
    for name, sub in more.items():
        if name not in out:
            out[name] = sub
        elif out[name] != sub and isinstance(out[name], dict) and isinstance(sub, dict):
            out[name] = {"allOf": [out[name], sub]}
    return out


def _is_null(branch: Any) -> bool:
    return isinstance(branch, dict) and branch.get("type") == "null" and len(branch) == 1


_OBJECT_KEYWORDS = ("properties", "required", "additionalProperties", "patternProperties")
_ARRAY_KEYWORDS = ("items", "prefixItems", "minItems", "maxItems", "uniqueItems")


def _inferred_type(node: Schema) -> str | None:
    """The type a node's other keywords imply: object or array by their keywords, else the
    one type every `enum` / `const` value has."""
    if any(key in node for key in _OBJECT_KEYWORDS):
        return "object"
    if any(key in node for key in _ARRAY_KEYWORDS):
        return "array"
    values = node["enum"] if isinstance(node.get("enum"), list) else None
    if "const" in node:
        values = [node["const"]]
    if not values:
        return None
    kinds = {_value_type(value) for value in values}
    if kinds == {"integer", "number"}:
        return "number"
    return kinds.pop() if len(kinds) == 1 and None not in kinds else None


def _value_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return None
