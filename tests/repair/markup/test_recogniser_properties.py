"""Adversarial properties of the recogniser (proxy/repair/markup/recogniser.py) and of the
declared tools it checks calls against (proxy/repair/calls/declared.py): split invariance,
nothing lost or invented, plain text not delayed, safety, bounded work, and never raising on
what a hostile upstream or an odd request schema can send."""

from __future__ import annotations

import orjson
import pytest

from proxy.repair.calls.declared import DeclaredTools
from tests.repair.markup.test_recogniser import CALL, recognise


def function(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def request_for(parameters: dict, name: str = "get_weather") -> dict:
    return {"messages": [], "tools": [function(name, parameters)]}


OPEN = request_for({"type": "object"})
"""A tool whose schema takes any object: only the recogniser's own limits refuse a call."""


def hermes(arguments: str, name: str = "get_weather") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def glm(name: str, key: str, value: str) -> str:
    return (
        f"<tool_call>{name}\n<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n</tool_call>"
    )


# ── never raising: what cannot be delivered faithfully stays text ─────────────────────────


@pytest.mark.parametrize(
    ("answer", "request_"),
    [
        # Arguments nested deeper than orjson writes (it reads 1024 levels, writes 254).
        (hermes('{"x": ' + "[" * 300 + "]" * 300 + "}"), OPEN),
        # An integer past 64 bits, from the pythonic family's Python literals.
        ("[get_weather(n=123456789012345678901234567890)]", OPEN),
        # A bare value typed integer by the schema, past what int() reads or orjson writes.
        (glm("f", "i", "9" * 5000), request_for({"properties": {"i": {"type": "integer"}}}, "f")),
        (glm("f", "i", "9" * 30), request_for({"properties": {"i": {"type": "integer"}}}, "f")),
        # A schema whose $ref points nowhere, or off the machine: refused, never fetched.
        (CALL, request_for({"properties": {"city": {"$ref": "#/$defs/nope"}}})),
        (CALL, request_for({"properties": {"city": {"$ref": "http://127.0.0.1:9/x.json"}}})),
        # A recursive schema checked against arguments nested as deep as orjson reads.
        (
            hermes('{"x": ' + "[" * 1000 + "]" * 1000 + "}"),
            request_for(
                {
                    "properties": {"x": {"$ref": "#/$defs/n"}},
                    "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                }
            ),
        ),
    ],
)
def test_what_cannot_be_delivered_faithfully_stays_text_and_never_raises(
    answer: str, request_: dict
) -> None:
    texts, calls, counts = recognise([answer], request=request_)
    assert calls == [] and "".join(texts) == answer
    assert counts["text_tool_call"] == 0 and sum(counts.values()) >= 1


NUMBERS = request_for(
    {"properties": {"n": {"type": "number"}, "i": {"type": "integer"}}, "required": []}, "f"
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("9007199254740993", 9007199254740993),  # 2**53 + 1: a float would round it
        ("-9007199254740993", -9007199254740993),
        ("2.5", 2.5),
        ("7", 7),
    ],
)
def test_a_bare_number_keeps_its_exact_value(value: str, expected: float) -> None:
    _, calls, _ = recognise([glm("f", "n", value)], request=NUMBERS)
    assert [orjson.loads(call.arguments) for call in calls] == [{"n": expected}]


@pytest.mark.parametrize("value", ["1e999", "-1e999"])
def test_a_bare_number_past_a_double_is_not_turned_into_null(value: str) -> None:
    answer = glm("f", "n", value)
    texts, calls, _ = recognise([answer], request=NUMBERS)
    assert calls == [] and "".join(texts) == answer


def test_typed_leaves_what_does_not_read_as_its_type_a_string() -> None:
    tools = DeclaredTools.of(NUMBERS)
    assert tools is not None
    assert tools.typed("f", {"i": "9" * 5000, "n": "1e999"}) == {"i": "9" * 5000, "n": "1e999"}
