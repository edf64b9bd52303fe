"""DeclaredTools (proxy/repair/calls/declared.py): which calls the request allows, what their
schemas accept, bare values read by type, and arguments decoded once only where that is what
makes them valid."""

from __future__ import annotations

import orjson

from proxy.repair.calls.declared import (
    INVALID_ARGUMENTS_KIND,
    SCHEMA_UNUSABLE_KIND,
    UNDECLARED_KIND,
    DeclaredTools,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "lines": {"type": "integer"},
        "ratio": {"type": "number"},
        "force": {"type": "boolean"},
        "options": {"type": "object", "properties": {"mode": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def tools(schema=SCHEMA) -> DeclaredTools:
    declared = DeclaredTools.of(
        {"tools": [{"type": "function", "function": {"name": "edit", "parameters": schema}}]}
    )
    assert declared is not None
    return declared


def test_check_says_why_a_call_is_refused() -> None:
    assert tools().check("edit", {"path": "a"}) is None
    assert tools().check("delete", {"path": "a"}) == UNDECLARED_KIND
    assert tools().check("edit", {"path": 1}) == INVALID_ARGUMENTS_KIND
    assert tools().check("edit", {"path": "a", "extra": 1}) == INVALID_ARGUMENTS_KIND
    assert tools({"type": 7}).check("edit", {}) == SCHEMA_UNUSABLE_KIND


def test_a_tool_without_parameters_takes_any_object() -> None:
    declared = DeclaredTools.of({"tools": [{"type": "function", "function": {"name": "now"}}]})
    assert declared is not None and declared.check("now", {}) is None
    assert declared.check("now", "text") == INVALID_ARGUMENTS_KIND


def test_bare_values_are_read_by_the_type_the_schema_gives() -> None:
    typed = tools().typed(
        "edit",
        {
            "path": "42",
            "lines": "12",
            "ratio": "0.5",
            "force": "true",
            "options": '{"mode": "w"}',
            "tags": '["a", "b"]',
            "note": "null",
        },
    )
    assert typed == {
        "path": "42",  # a string stays a string, digits or not
        "lines": 12,
        "ratio": 0.5,
        "force": True,
        "options": {"mode": "w"},
        "tags": ["a", "b"],
        # null is one of its types (with string): JSON's null, as the servers read it (issue 27)
        "note": None,
    }
    assert tools().check("edit", typed) is None


def test_a_bare_value_that_is_not_its_type_stays_text_and_fails() -> None:
    typed = tools().typed("edit", {"path": "a", "lines": "twelve", "force": "yes"})
    assert typed == {"path": "a", "lines": "twelve", "force": "yes"}
    assert tools().check("edit", typed) == INVALID_ARGUMENTS_KIND


def test_arguments_encoded_twice_are_decoded_once() -> None:
    inner = '{"path": "a.txt", "lines": 3}'
    fixed = tools().reshaped("edit", orjson.dumps(inner).decode())
    assert fixed is not None and orjson.loads(fixed) == {"path": "a.txt", "lines": 3}


def test_a_property_encoded_as_text_is_decoded_when_its_schema_wants_the_object() -> None:
    sent = orjson.dumps({"path": "a", "options": '{"mode": "w"}', "tags": '["x"]'}).decode()
    fixed = tools().reshaped("edit", sent)
    assert fixed is not None
    assert orjson.loads(fixed) == {"path": "a", "options": {"mode": "w"}, "tags": ["x"]}


def test_nothing_is_reshaped_that_is_valid_or_would_stay_invalid() -> None:
    assert tools().reshaped("edit", '{"path": "{\\"a\\": 1}"}') is None  # a string is due
    assert tools().reshaped("edit", '{"path": 1, "options": "{\\"mode\\": \\"w\\"}"}') is None
    assert tools().reshaped("edit", orjson.dumps('{"path": 5}').decode()) is None
    assert tools().reshaped("edit", "not json") is None
    assert tools().reshaped("other", orjson.dumps('{"path": "a"}').decode()) is None


def test_a_call_with_nothing_to_reshape_never_builds_a_validator() -> None:
    # Every call of every upstream is asked: validating costs a metaschema check per tool.
    declared = tools()
    assert declared.reshaped("edit", '{"path": "a", "lines": 3}') is None
    assert declared._validators == {}


def test_validators_are_shared_across_requests_for_the_same_schema() -> None:
    first, second = tools(), tools()
    assert first.check("edit", {"path": "a"}) is None
    assert second.check("edit", {"path": "b"}) is None
    assert first._validators["edit"] is second._validators["edit"]


def test_no_regular_expression_from_the_request_is_ever_run() -> None:
    # `(a+)+$` against thirty "a"s and a "!" backtracks for minutes in Python's re: the shared
    # event loop would stall. Without the pattern the call is judged by the rest.
    evil = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "pattern": "^(a+)+$"},  # a property named pattern
            "tag": {"type": "string"},
        },
        "required": ["pattern"],
        "patternProperties": {"^(b+)+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    declared = tools(evil)
    assert declared.check("edit", {"pattern": "a" * 40 + "!"}) is None
    assert declared.check("edit", {"pattern": 5}) == INVALID_ARGUMENTS_KIND  # still typed
    assert declared.check("edit", {"tag": "x"}) == INVALID_ARGUMENTS_KIND  # still required
    assert declared.check("edit", {"pattern": "a", "b" * 40 + "!": 1}) == INVALID_ARGUMENTS_KIND


def test_null_is_read_as_null_only_where_the_schema_allows_it() -> None:
    typed = tools().typed("edit", {"path": "null", "note": " null "})
    assert typed == {"path": "null", "note": None}  # path is a string only: its text stays


def test_types_are_found_through_nested_any_of_one_of_and_all_of() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {"anyOf": [{"oneOf": [{"allOf": [{"type": "array"}]}]}, {"type": "null"}]}
        },
    }
    declared = DeclaredTools({"f": schema})
    assert declared.typed("f", {"items": '[1, "a"]'}) == {"items": [1, "a"]}
    assert declared.typed("f", {"items": "null"}) == {"items": None}


def test_a_lone_arguments_or_input_wrapper_is_unwrapped_only_when_undeclared() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    declared = DeclaredTools({"f": schema, "g": {"properties": {"input": {"type": "string"}}}})
    assert declared.unwrapped("f", {"arguments": {"city": "Paris"}}) == {"city": "Paris"}
    assert declared.unwrapped("f", {"input": '{"city": "Paris"}'}) == {"city": "Paris"}
    assert declared.unwrapped("f", {"input": {"town": "Paris"}}) == {"input": {"town": "Paris"}}
    assert declared.unwrapped("f", {"input": "Paris"}) == {"input": "Paris"}
    assert declared.unwrapped("g", {"input": '{"x": 1}'}) == {"input": '{"x": 1}'}
