"""rewrite_schema: each rule on small schemas, identity, recursion, property paths kept and
the output accepted (hypothesis), and schemas as coding agents and MCP servers send them."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.repair.dialects.refs import RECURSION_DEPTH
from proxy.repair.dialects.schemas import DIALECTS, rewrite_schema
from tests.repair.dialects.accepts import gemini_violations, moonshot_violations, property_paths
from tests.repair.dialects.samples import ALREADY_FINE, EDIT_TOOL, MCP_TOOL

GEMINI = DIALECTS["gemini"]
MOONSHOT = DIALECTS["moonshot"]


def gemini(schema: dict[str, Any]) -> tuple[Any, Counter[str]]:
    before = copy.deepcopy(schema)
    out, kinds = rewrite_schema(schema, GEMINI)
    assert schema == before, "the input was changed"
    return out, Counter(kinds)


def moonshot(schema: dict[str, Any]) -> tuple[Any, Counter[str]]:
    before = copy.deepcopy(schema)
    out, kinds = rewrite_schema(schema, MOONSHOT)
    assert schema == before, "the input was changed"
    return out, Counter(kinds)


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


# ── references ───────────────────────────────────────────────────────────────


@pytest.mark.parametrize("where", ["$defs", "definitions"])
def test_a_local_ref_is_inlined_and_the_definitions_go(where: str) -> None:
    schema = {
        **obj(city={"$ref": f"#/{where}/City", "description": "where"}),
        where: {"City": {"type": "string", "description": "a city", "minLength": 1}},
    }
    out, kinds = gemini(schema)
    assert out == obj(city={"type": "string", "description": "where", "minLength": 1})
    assert kinds == Counter({"schema_ref_inlined": 1, "schema_keyword_removed": 1})


def test_a_pointer_into_the_schema_itself_is_inlined() -> None:
    schema = obj(a={"type": "string"}, b={"$ref": "#/properties/a"})
    out, kinds = moonshot(schema)
    assert out == obj(a={"type": "string"}, b={"type": "string"})
    assert kinds == Counter({"schema_ref_inlined": 1})


def test_recursion_stops_at_the_bound_with_a_typed_node_that_says_so() -> None:
    node = {"type": "object", "properties": {"name": {"type": "string"}}}
    node["properties"]["child"] = {"$ref": "#/$defs/Node"}
    schema = {**obj(root={"$ref": "#/$defs/Node"}), "$defs": {"Node": node}}
    out, kinds = gemini(schema)
    cut = {"type": "object", "description": "recursive: see Node"}
    level2 = obj(name={"type": "string"}, child=cut)
    level1 = obj(name={"type": "string"}, child=level2)
    assert RECURSION_DEPTH == 2
    assert out == obj(root=level1)
    assert kinds == Counter(
        {"schema_ref_inlined": 2, "schema_recursion_cut": 1, "schema_keyword_removed": 1}
    )


def test_a_reference_to_the_root_is_cut_the_same_way() -> None:
    schema = obj(next={"$ref": "#"}, value={"type": "integer"})
    out, _ = moonshot(schema)
    assert out["properties"]["next"]["properties"]["next"]["properties"]["next"] == {
        "type": "object",
        "description": "recursive: see the whole schema",
    }


def test_a_reference_that_cannot_be_resolved_says_where_it_pointed() -> None:
    out, kinds = gemini(obj(a={"$ref": "https://example.com/a.json", "type": "string"}))
    assert out == obj(a={"type": "string", "description": "see https://example.com/a.json"})
    assert kinds == Counter({"schema_ref_unresolved": 1})


# ── types ────────────────────────────────────────────────────────────────────


def test_a_type_with_null_becomes_the_type_nullable() -> None:
    out, kinds = gemini(obj(n={"type": ["string", "null"], "description": "name"}))
    assert out == obj(n={"type": "string", "nullable": True, "description": "name"})
    assert kinds == Counter({"schema_type_array_rewritten": 1})


def test_several_types_become_any_of() -> None:
    out, kinds = gemini(obj(v={"type": ["string", "integer", "null"]}))
    assert out == obj(v={"anyOf": [{"type": "string"}, {"type": "integer"}], "nullable": True})
    assert kinds == Counter({"schema_type_array_rewritten": 1})


def test_a_null_branch_of_any_of_becomes_nullable() -> None:
    # Optional[str] as pydantic writes it.
    out, kinds = gemini(obj(v={"anyOf": [{"type": "string"}, {"type": "null"}], "title": "V"}))
    assert out == obj(v={"anyOf": [{"type": "string"}], "title": "V", "nullable": True})
    assert kinds == Counter({"schema_null_to_nullable": 1})


def test_one_of_becomes_any_of() -> None:
    out, kinds = gemini(obj(v={"oneOf": [{"type": "string"}, {"type": "integer"}]}))
    assert out == obj(v={"anyOf": [{"type": "string"}, {"type": "integer"}]})
    assert kinds == Counter({"schema_one_of_to_any_of": 1})


def test_all_of_is_merged_into_its_node() -> None:
    schema = {
        "allOf": [
            obj(a={"type": "string"}) | {"required": ["a"]},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"], "type": "object"},
        ]
    }
    out, kinds = gemini(schema)
    assert out == {
        "properties": {"b": {"type": "integer"}, "a": {"type": "string"}},
        "type": "object",
        "required": ["a", "b"],
    }
    assert kinds == Counter({"schema_all_of_merged": 1})


def test_a_tuple_becomes_one_items_schema_with_its_order_described() -> None:
    pair = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}
    out, kinds = gemini(obj(pair=pair, old={"type": "array", "items": [{"type": "string"}]}))
    assert out == obj(
        pair={
            "type": "array",
            "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "description": 'a tuple: the items in order are [{"type": "string"}, '
            '{"type": "integer"}]',
        },
        old={
            "type": "array",
            "items": {"type": "string"},
            "description": 'a tuple: the items in order are [{"type": "string"}]',
        },
    )
    assert kinds == Counter({"schema_tuple_rewritten": 2})


# ── const, enum, format ──────────────────────────────────────────────────────


def test_a_string_const_becomes_a_one_value_enum() -> None:
    out, kinds = gemini(obj(mode={"const": "replace"}))
    assert out == obj(mode={"enum": ["replace"], "type": "string"})
    assert kinds == Counter({"schema_const_to_enum": 1})


def test_a_number_const_and_number_enums_go_into_the_description() -> None:
    # Gemini's enum is string[]: "Invalid value at '...enum[0]' (TYPE_STRING), 1".
    out, kinds = gemini(
        obj(
            version={"type": "integer", "const": 2},
            level={"type": "integer", "enum": [1, 2, 3], "description": "how loud"},
        )
    )
    assert out == obj(
        version={"type": "integer", "description": "must be exactly 2"},
        level={"type": "integer", "description": "how loud (must be one of: 1, 2, 3)"},
    )
    assert kinds == Counter({"schema_keyword_moved_to_description": 2})


def test_only_the_formats_gemini_knows_stay() -> None:
    schema = obj(
        id={"type": "string", "format": "uuid"},
        at={"type": "string", "format": "date-time"},
        n={"type": "integer", "format": "int64"},
        x={"type": "number", "format": "int32"},
    )
    out, kinds = gemini(schema)
    assert out == obj(
        id={"type": "string", "description": "format: uuid"},
        at={"type": "string", "format": "date-time"},
        n={"type": "integer", "format": "int64"},
        x={"type": "number", "description": "format: int32"},
    )
    assert kinds == Counter({"schema_keyword_moved_to_description": 2})


# ── keywords Gemini does not have ────────────────────────────────────────────


def test_constraints_gemini_cannot_take_are_written_into_the_description() -> None:
    schema = {
        **obj(
            limit={"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
            tags={
                "type": "object",
                "propertyNames": {"pattern": "^[a-z]+$"},
                "additionalProperties": {"type": "string"},
            },
            env={"type": "object", "patternProperties": {"^X_": {"type": "string"}}},
            mode={"type": "string", "default": "fast", "description": "How."},
        ),
        "additionalProperties": False,
    }
    out, kinds = gemini(schema)
    assert out == {
        **obj(
            limit={
                "type": "integer",
                "description": "must be greater than 0; must be less than 100",
            },
            tags={
                "type": "object",
                "description": "property names must match the regular expression ^[a-z]+$; "
                'any other property must be {"type": "string"}',
            },
            env={
                "type": "object",
                "description": "properties whose names match a pattern: "
                '{"^X_": {"type": "string"}}',
            },
            mode={"type": "string", "description": 'How. (default: "fast")'},
        ),
        "description": "no properties other than those listed",
    }
    assert kinds == Counter({"schema_keyword_moved_to_description": 7})


def test_keywords_without_meaning_for_the_model_are_removed() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "urn:tool",
        **obj(a={"type": "string", "x-order": 1, "$comment": "internal"}),
    }
    out, kinds = gemini(schema)
    assert out == obj(a={"type": "string"})
    assert kinds == Counter({"schema_keyword_removed": 4})


def test_gemini_gets_an_object_root_when_the_root_has_properties() -> None:
    out, kinds = gemini({"properties": {"a": {"type": "string"}}})
    assert out == obj(a={"type": "string"})
    assert kinds == Counter({"schema_type_added": 1})
    empty: dict[str, Any] = {}
    assert gemini(empty)[0] is empty  # "for a function with no parameters, leave it unset"


# ── Moonshot ─────────────────────────────────────────────────────────────────


def test_moonshot_gets_a_type_on_every_node_that_implies_one() -> None:
    schema = {
        "properties": {
            "opts": {"properties": {"x": {"type": "string"}}},
            "list": {"items": {"type": "string"}},
            "mode": {"enum": ["a", "b"]},
            "n": {"enum": [1, 2.5]},
            "flag": {"const": True},
        }
    }
    out, kinds = moonshot(schema)
    assert out == {
        "properties": {
            "opts": obj(x={"type": "string"}),
            "list": {"items": {"type": "string"}, "type": "array"},
            "mode": {"enum": ["a", "b"], "type": "string"},
            "n": {"enum": [1, 2.5], "type": "number"},
            "flag": {"const": True, "type": "boolean"},
        },
        "type": "object",
    }
    assert kinds == Counter({"schema_type_added": 6})


def test_moonshot_a_node_nothing_types_is_left_and_counted() -> None:
    schema = obj(anything={"description": "any JSON value"})
    out, kinds = moonshot(schema)
    assert out is schema
    assert kinds == Counter({"schema_type_unknown": 1})


def test_moonshot_the_type_beside_any_of_moves_into_the_branches() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"], "type": "object"}],
    }
    out, kinds = moonshot(schema)
    assert out == {
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "anyOf": [{"type": "object", "required": ["a"]}, {"required": ["b"], "type": "object"}],
    }
    assert kinds == Counter({"schema_type_moved_into_any_of": 1})
    assert moonshot_violations(out) == []


def test_moonshot_conditionals_go_into_the_description() -> None:
    # "Conflict in schema definitions for key 'if'" (opencode#31580).
    schema = {**obj(a={"type": "string"}), "if": {"required": ["a"]}, "then": {"required": []}}
    out, kinds = moonshot(schema)
    assert out == {
        **obj(a={"type": "string"}),
        "description": 'if: {"required": ["a"]}; then: {"required": []}',
    }
    assert kinds == Counter({"schema_keyword_moved_to_description": 2})


def test_moonshot_an_empty_root_is_an_object() -> None:
    assert moonshot({}) == ({"type": "object"}, Counter({"schema_type_added": 1}))


# ── identity ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("dialect", ["gemini", "moonshot"])
def test_a_schema_that_needs_nothing_is_returned_as_the_same_object(dialect: str) -> None:
    schema = copy.deepcopy(ALREADY_FINE)
    out, kinds = rewrite_schema(schema, DIALECTS[dialect])
    assert out is schema and kinds == []


def test_anything_but_an_object_is_left_alone() -> None:
    for value in (None, True, "x", [1]):
        assert rewrite_schema(value, GEMINI) == (value, [])


def test_only_the_changed_branch_is_new() -> None:
    schema = obj(keep=obj(a={"type": "string"}), change={"type": ["string", "null"]})
    out, _ = gemini(schema)
    assert out is not schema and out["properties"]["keep"] is schema["properties"]["keep"]


# ── schemas as agents send them ──────────────────────────────────────────────


def test_an_edit_tool_like_opencodes_is_accepted_by_gemini() -> None:
    assert gemini_violations(EDIT_TOOL)  # as sent, rejected
    out, kinds = gemini(EDIT_TOOL)
    assert out == {
        "type": "object",
        "properties": {
            "filePath": EDIT_TOOL["properties"]["filePath"],
            "oldString": EDIT_TOOL["properties"]["oldString"],
            "newString": EDIT_TOOL["properties"]["newString"],
            "replaceAll": {
                "type": "boolean",
                "nullable": True,
                "description": "Replace all occurrences",
            },
            "limit": {"type": "integer", "description": "must be greater than 0"},
        },
        "required": ["filePath", "oldString", "newString"],
        "description": "no properties other than those listed",
    }
    assert kinds == Counter(
        {
            "schema_keyword_removed": 1,
            "schema_keyword_moved_to_description": 2,
            "schema_type_array_rewritten": 1,
        }
    )
    assert gemini_violations(out) == []


def test_an_mcp_tool_with_defs_is_accepted_by_both() -> None:
    resolved_paths = {
        ("tasks",),
        ("tasks", "[]", "title"),
        ("tasks", "[]", "priority"),
        ("tasks", "[]", "due"),
        ("tasks", "[]", "labels"),
        ("project",),
    }
    out, kinds = gemini(MCP_TOOL)
    assert gemini_violations(out) == [] and property_paths(out) == resolved_paths
    task = out["properties"]["tasks"]["items"]
    assert task["properties"]["priority"] == {
        "enum": ["low", "high"],
        "title": "Priority",
        "type": "string",
        "description": 'default: "low"',
    }
    assert task["properties"]["due"] == {
        "anyOf": [{"format": "date-time", "type": "string"}],
        "title": "Due",
        "nullable": True,
        "description": "default: null",
    }
    assert kinds["schema_ref_inlined"] == 2 and kinds["schema_null_to_nullable"] == 2
    out, kinds = moonshot(MCP_TOOL)
    assert moonshot_violations(out) == [] and property_paths(out) == resolved_paths
    assert kinds == Counter({"schema_ref_inlined": 2, "schema_keyword_removed": 1})


# ── properties: nothing lost, everything accepted ────────────────────────────

NAMES = st.sampled_from(["a", "b", "type", "$ref", "items", "properties", "x-y", "enum"])
EXTRAS = st.fixed_dictionaries(
    {},
    optional={
        "description": st.sampled_from(["", "the value", "a (b)"]),
        "title": st.just("T"),
        "$comment": st.just("c"),
        "x-internal": st.booleans(),
        "default": st.one_of(st.none(), st.integers(), st.text(max_size=3)),
        "examples": st.lists(st.integers(), max_size=2),
        "deprecated": st.booleans(),
    },
)
SCALAR_TYPES = st.sampled_from(["string", "integer", "number", "boolean"])


@st.composite
def scalars(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(SCALAR_TYPES)
    node: dict[str, Any] = {"type": kind}
    if draw(st.booleans()):
        node["type"] = [kind, "null"] if draw(st.booleans()) else [kind, "string", "null"]
    shape = draw(st.sampled_from(["plain", "const", "enum", "format", "bounds"]))
    if shape == "const":
        node["const"] = draw(st.one_of(st.text(max_size=3), st.integers()))
    elif shape == "enum":
        node["enum"] = draw(
            st.one_of(
                st.lists(st.text(max_size=3), min_size=1, max_size=3),
                st.lists(st.integers(), min_size=1, max_size=3),
            )
        )
    elif shape == "format":
        node["format"] = draw(st.sampled_from(["uuid", "date-time", "email", "int64"]))
    elif shape == "bounds":
        node[draw(st.sampled_from(["exclusiveMinimum", "minimum", "multipleOf"]))] = 1
    return {**draw(EXTRAS), **node}


def containers(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def objects(props: dict[str, Any], extra: Any, typed: bool) -> dict[str, Any]:
        node: dict[str, Any] = {"properties": props, "required": sorted(props)[:1]}
        if typed:
            node["type"] = "object"
        if extra is not None:
            node["additionalProperties"] = extra
        return node

    return st.one_of(
        st.builds(
            objects,
            st.dictionaries(NAMES, children, max_size=3),
            st.sampled_from([None, True, False]),
            st.booleans(),
        ),
        st.builds(lambda item: {"type": "array", "items": item}, children),
        st.builds(lambda item: {"items": item, "minItems": 1}, children),
        st.builds(
            lambda items, key: {"type": "array", key: items},
            st.lists(children, min_size=1, max_size=3),
            st.sampled_from(["items", "prefixItems"]),
        ),
        st.builds(lambda cond: {"type": "object", "if": cond, "then": cond}, children),
        st.builds(
            lambda branches, key: {key: branches},
            st.lists(children, min_size=1, max_size=3),
            st.sampled_from(["anyOf", "oneOf"]),
        ),
        st.builds(
            lambda a, b: {"allOf": [{"properties": a}, {"properties": b, "type": "object"}]},
            st.dictionaries(NAMES, children, max_size=2),
            st.dictionaries(NAMES, children, max_size=2),
        ),
    )


SCHEMAS = st.recursive(scalars(), containers, max_leaves=12).map(
    lambda inner: {"$schema": "https://json-schema.org/draft/2020-12/schema", **obj(root=inner)}
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS)
def test_gemini_keeps_every_property_and_accepts_the_result(schema: dict[str, Any]) -> None:
    out, _ = gemini(schema)
    assert property_paths(schema) <= property_paths(out)
    assert gemini_violations(out) == []
    again, kinds = rewrite_schema(out, GEMINI)
    assert again is out and kinds == []  # a rewritten schema needs nothing more


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS)
def test_moonshot_keeps_every_property_and_accepts_the_result(schema: dict[str, Any]) -> None:
    out, _ = moonshot(schema)
    assert property_paths(schema) <= property_paths(out)
    assert moonshot_violations(out) == []


def test_a_tuple_merged_with_an_object_items_keeps_the_objects_properties() -> None:
    # Found by the property test: `items` as a tuple in one allOf branch and as an object
    # schema in the other; the object's `a` was written into the description and lost.
    schema = {
        "type": "object",
        "allOf": [
            {"properties": {"a": {"type": "array", "items": [{"type": "string"}]}}},
            {
                "properties": {
                    "a": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"a": {"type": "string"}}},
                    }
                }
            },
        ],
    }
    rewritten, _ = rewrite_schema(schema, DIALECTS["gemini"])
    assert property_paths(schema) <= property_paths(rewritten)
