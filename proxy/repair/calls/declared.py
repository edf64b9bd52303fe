"""The tools a request declared, and what their JSON schemas allow a call's arguments to be.

Tool calls recognised in text are delivered only when this says yes; arguments in the wrong
shape are reshaped only when the reshaped value validates and the received one does not.
Validation uses jsonschema (the draft a schema names with `$schema`, else 2020-12), built
lazily per tool, so a request whose calls all arrive as real `tool_calls` pays nothing.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from proxy.repair.dialects.walk import map_children
from proxy.wire import json_codec

# Why a call is refused, as the kind it is counted under.
UNDECLARED_KIND = "text_tool_call_undeclared"
INVALID_ARGUMENTS_KIND = "text_tool_call_invalid_arguments"
SCHEMA_UNUSABLE_KIND = "text_tool_call_schema_unusable"

_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


class DeclaredTools:
    """The function tools of one request that a call may name (`tool_choice` narrows them)."""

    def __init__(self, schemas: Mapping[str, Any]) -> None:
        self._schemas = dict(schemas)
        self._validators: dict[str, Any] = {}

    @classmethod
    def of(cls, request: Mapping[str, Any]) -> DeclaredTools | None:
        """None when the request gives no function tool a call could name: no `tools`, or
        `tool_choice: "none"`. A named `tool_choice` leaves only that tool, `allowed_tools` only
        those it lists, a forced custom tool none."""
        choice = request.get("tool_choice")
        if choice == "none":
            return None
        schemas: dict[str, Any] = {}
        tools = request.get("tools")
        for tool in tools if isinstance(tools, list) else ():
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict):
                continue
            name = function.get("name")
            if isinstance(name, str) and name and name not in schemas:
                parameters = function.get("parameters")
                schemas[name] = parameters if parameters is not None else {"type": "object"}
        allowed = _allowed_names(choice)
        if allowed is not None:
            schemas = {name: schemas[name] for name in schemas if name in allowed}
        return cls(schemas) if schemas else None

    def __contains__(self, name: object) -> bool:
        return name in self._schemas

    def check(self, name: str, arguments: Any) -> str | None:
        """None when `arguments` are a valid call of `name`; else why not (a refusal kind)."""
        if name not in self._schemas:
            return UNDECLARED_KIND
        validator = self._validator(name)
        if validator is None:
            return SCHEMA_UNUSABLE_KIND
        try:
            valid = validator.is_valid(arguments)
        except Unresolvable:
            return SCHEMA_UNUSABLE_KIND  # a $ref to nowhere, or off the machine: never fetched
        except (RecursionError, OverflowError):
            # Arguments nested past what a recursive schema checks, or an integer too large for
            # the float a `multipleOf` divides it as.
            return INVALID_ARGUMENTS_KIND
        return None if valid else INVALID_ARGUMENTS_KIND

    def typed(self, name: str, strings: Mapping[str, str]) -> dict[str, Any]:
        """Argument values a family wrote as bare text, converted by the types the schema gives
        each property. A value that does not read as its type stays a string (validation then
        refuses it); a property the schema does not type stays a string."""
        properties = _properties(self._schemas.get(name))
        return {key: _as_type(value, properties.get(key)) for key, value in strings.items()}

    def unwrapped(self, name: str, arguments: Any) -> Any:
        """`arguments` whose only key is `arguments` or `input`, a property the schema does not
        declare, holding an object (or its JSON text) of declared properties only: that object.
        Anything else as it was. vLLM's DeepSeek V3.2 parser (`_repair_param_dict`) does this."""
        if not isinstance(arguments, dict) or len(arguments) != 1:
            return arguments
        [(wrapper, inner)] = arguments.items()
        properties = _properties(self._schemas.get(name))
        if wrapper not in ("arguments", "input") or wrapper in properties:
            return arguments
        if isinstance(inner, str):
            inner = _decoded(inner)
        if isinstance(inner, dict) and set(inner) <= set(properties):
            return inner
        return arguments

    def reshaped(self, name: str, arguments: str) -> str | None:
        """Arguments an upstream encoded once too often, decoded once, when the schema wants
        the decoded shape: the whole object sent as a JSON string, or a property that should be
        an object or array sent as its JSON text. None when nothing needs (or may) change."""
        if name not in self._schemas:
            return None
        value = _decoded(arguments)
        if value is None:
            return None
        if isinstance(value, str):
            inner = _decoded(value)
            if isinstance(inner, dict) and self.check(name, inner) is None:
                return _encoded(inner)
            return None
        if not isinstance(value, dict):
            return None
        # Every call of every upstream comes through here: the candidates are found first, so
        # the schema is validated (its validator built) only for a call that has one.
        properties = _properties(self._schemas[name])
        fixed = dict(value)
        for key, item in value.items():
            if not isinstance(item, str) or not item.lstrip().startswith(("{", "[")):
                continue
            wanted = _types(properties.get(key))
            if wanted & {"object", "array"}:
                inner = _decoded(item)
                if (isinstance(inner, dict) and "object" in wanted) or (
                    isinstance(inner, list) and "array" in wanted
                ):
                    fixed[key] = inner
        if fixed == value or self.check(name, value) != INVALID_ARGUMENTS_KIND:
            return None
        return _encoded(fixed) if self.check(name, fixed) is None else None

    def may_reshape(self, name: str) -> bool:
        """Whether a call of `name` could have a property decoded by `reshaped`: the schema
        wants an object or array for one. Only the whole value can tell, so such a call cannot
        be streamed as it arrives (ToolCallRepair's auto emission holds it)."""
        if name not in self._schemas:
            return False
        properties = _properties(self._schemas[name]).values()
        return any(_types(item) & {"object", "array"} for item in properties)

    def _validator(self, name: str) -> Any:
        if name not in self._validators:
            self._validators[name] = _validator_for(self._schemas[name])
        return self._validators[name]


_VALIDATORS: OrderedDict[bytes, Any] = OrderedDict()
VALIDATOR_CACHE_SIZE = 256
MAX_CACHED_SCHEMA_BYTES = 65_536
"""Validators kept across requests, by schema: an agent sends the same tools on every turn, and
checking a schema against its metaschema costs far more than checking a call against it."""


def _validator_for(schema: Any) -> Any:
    """A validator for `schema` (the draft its `$schema` names, else 2020-12), or None when the
    schema is not one; the most recently used `VALIDATOR_CACHE_SIZE` are kept."""
    written = json_codec.dumps_sorted(schema)
    # The cache holds at most 256 x 64 KiB of schemas: a larger one is built every time.
    key = written if len(written) <= MAX_CACHED_SCHEMA_BYTES else None
    if key is not None and key in _VALIDATORS:
        _VALIDATORS.move_to_end(key)
        return _VALIDATORS[key]
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        validator = cls(_without_patterns(schema))
    except (SchemaError, TypeError, ValueError, AttributeError, RecursionError):
        # The schema is the request's: jsonschema reads a `$schema` that is not a string
        # (5, true) with AttributeError before it can say SchemaError.
        validator = None
    if key is not None:
        _VALIDATORS[key] = validator
        if len(_VALIDATORS) > VALIDATOR_CACHE_SIZE:
            _VALIDATORS.popitem(last=False)
    return validator


def _without_patterns(schema: Any) -> Any:
    """`schema` with no regular expression left to run: `pattern` and `patternProperties`
    come from the request, and one written to backtrack (`(a+)+$`) would hold the event loop,
    and with it every other exchange of the process, while it ran on the model's text. Without
    them a call can only be refused more often (an extra property `patternProperties` would
    have admitted), never accepted against the rest of the schema."""
    if not isinstance(schema, dict):
        return schema
    node = map_children(schema, _without_patterns)
    if "pattern" in node or "patternProperties" in node:
        node = {k: v for k, v in node.items() if k not in ("pattern", "patternProperties")}
    return node


def _allowed_names(choice: Any) -> set[str] | None:
    """The function names a dict `tool_choice` leaves a call (None: it narrows nothing): the
    named function; those `allowed_tools` lists; none when it forces a custom tool."""
    if not isinstance(choice, dict):
        return None
    if isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        return {name} if isinstance(name, str) else None
    kind = choice.get("type")
    if kind == "custom":
        return set()
    if kind == "allowed_tools":
        listed = choice.get("allowed_tools")
        tools = listed.get("tools") if isinstance(listed, dict) else None
        names = set()
        for tool in tools if isinstance(tools, list) else ():
            function = tool.get("function") if isinstance(tool, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str):
                names.add(name)
        return names
    return None


def _properties(schema: Any) -> Mapping[str, Any]:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return properties if isinstance(properties, dict) else {}


MAX_TYPE_DEPTH = 8
"""How deep `_types` looks through nested anyOf / oneOf / allOf (the schema is the request's)."""


def _types(schema: Any, depth: int = 0) -> set[str]:
    """The types a property schema names, directly or through anyOf / oneOf / allOf at any depth
    (up to `MAX_TYPE_DEPTH`): `{"anyOf": [{"anyOf": [{"type": "array"}]}, {"type": "null"}]}`
    names array and null. SGLang's `infer_type_from_json_schema` and vLLM's
    `extract_types_from_schema` look through these too."""
    if not isinstance(schema, dict) or depth > MAX_TYPE_DEPTH:
        return set()
    named = schema.get("type")
    types = {named} if isinstance(named, str) else set(t for t in named or () if isinstance(t, str))
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        for option in options if isinstance(options, list) else ():
            types |= _types(option, depth + 1)
    return types


def _decoded(text: str) -> Any:
    """JSON text read with every integer exact (json_codec); None when it is not JSON."""
    try:
        return json_codec.loads(text)
    except (json_codec.JSONDecodeError, RecursionError):
        return None


def _encoded(value: Any) -> str:
    return json_codec.dumps(value).decode()


def _as_type(text: str, schema: Any) -> Any:
    """`text` read as the first of the property's types it reads as; else the text itself.
    A number keeps its exact value (an integer is read as one, never through a float), and one
    that no double holds (`1e999`) or too long for `int` stays text: validation then refuses it.
    `null` is JSON's null wherever the schema allows null, string or not (`anyOf: [string,
    null]`): vLLM's Qwen3-Coder, MiniMax-M2 and DSML parsers read `null` so for every type, which
    would turn a string-only parameter's text "null" into a refused call; here it stays text."""
    types = _types(schema)
    stripped = text.strip()
    if "null" in types and stripped == "null":
        return None
    if not types or "string" in types:
        return text
    for kind in ("integer", "number", "boolean", "null", "object", "array"):
        if kind not in types:
            continue
        if kind in ("integer", "number") and _INTEGER.fullmatch(stripped):
            try:
                return int(stripped)
            except ValueError:  # past Python's digit limit for int()
                continue
        if kind == "number" and _NUMBER.fullmatch(stripped):
            number = float(stripped)
            if math.isfinite(number):
                return number
        if kind == "boolean" and stripped in ("true", "false"):
            return stripped == "true"
        if kind == "null" and stripped == "null":
            return None
        if kind in ("object", "array"):
            value = _decoded(stripped)
            if isinstance(value, dict if kind == "object" else list):
                return value
    return text
