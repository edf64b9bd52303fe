"""ResponseFormatDowngraded: a `json_schema` response format goes up as JSON mode, the schema in
the leading system message, only when the route says so; anything else is left as sent."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from proxy.repair.profiles import PROFILES
from proxy.repair.repairs.response_format import (
    DOWNGRADED_KIND,
    ResponseFormatDowngraded,
    asks_json_schema,
)
from proxy.repair.rules import RouteRuleKeys, RouteRules, resolve
from tests.support.phases import apply, exchange

DOWNGRADE = RouteRules(response_format_schema="json_object")
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
    "additionalProperties": False,
}
SAID = (
    "Answer with one JSON object, and nothing else, that validates against this JSON schema: "
    '{"type":"object","properties":{"title":{"type":"string"}},"required":["title"],'
    '"additionalProperties":false}'
)
USER = {"role": "user", "content": "Name this session."}


def structured(*messages: dict[str, Any], schema: Any = SCHEMA) -> dict[str, Any]:
    """What the AI SDK's generateObject and the Messages front send for a schema."""
    described: dict[str, Any] = {"name": "output", "strict": True}
    if schema is not None:
        described["schema"] = schema
    return {
        "model": "m",
        "messages": list(messages or [USER]),
        "response_format": {"type": "json_schema", "json_schema": described},
    }


def downgraded(body: dict[str, Any]) -> tuple[bool, dict[str, int]]:
    changed, context = apply(ResponseFormatDowngraded(), body, DOWNGRADE)
    return changed, dict(context.tally.repairs)


def test_the_format_becomes_json_mode_and_the_schema_a_leading_system_message() -> None:
    body = structured(USER)
    assert downgraded(body) == (True, {DOWNGRADED_KIND: 1})
    assert body == {
        "model": "m",
        "messages": [{"role": "system", "content": SAID}, USER],
        "response_format": {"type": "json_object"},
    }


def test_the_instruction_joins_a_leading_system_or_developer_message() -> None:
    system = structured({"role": "system", "content": "You name sessions."}, USER)
    assert downgraded(system)[0]
    assert system["messages"] == [
        {"role": "system", "content": "You name sessions.\n\n" + SAID},
        USER,
    ]
    parts = [{"type": "text", "text": "You name sessions."}]
    developer = structured({"role": "developer", "content": copy.deepcopy(parts)}, USER)
    assert downgraded(developer)[0]
    assert developer["messages"][0] == {
        "role": "developer",
        "content": [*parts, {"type": "text", "text": SAID}],
    }
    empty = structured({"role": "system", "content": ""}, USER)
    assert downgraded(empty)[0]
    assert empty["messages"][0] == {"role": "system", "content": SAID}


def test_a_system_message_after_the_first_is_never_where_the_instruction_goes() -> None:
    late = {"role": "system", "content": "Be brief."}
    body = structured(USER, late)
    assert downgraded(body)[0]
    assert body["messages"] == [{"role": "system", "content": SAID}, USER, late]


def test_a_format_without_a_schema_asks_for_json_alone() -> None:
    body = structured(USER, schema=None)
    assert downgraded(body)[0]
    assert body["messages"][0] == {
        "role": "system",
        "content": "Answer with one JSON object, and nothing else.",
    }


def test_the_same_schema_gives_the_same_words() -> None:
    first, second = structured(USER), structured(USER)
    downgraded(first)
    downgraded(second)
    assert orjson.dumps(first) == orjson.dumps(second)


@pytest.mark.parametrize(
    "response_format",
    [None, {"type": "json_object"}, {"type": "text"}, "json_schema", {"json_schema": {}}],
)
def test_anything_but_a_json_schema_format_is_left_as_sent(response_format: Any) -> None:
    body: dict[str, Any] = {"model": "m", "messages": [USER]}
    if response_format is not None:
        body["response_format"] = response_format
    sent = copy.deepcopy(body)
    assert downgraded(body) == (False, {})
    assert body == sent
    assert not asks_json_schema(body)


def test_left_as_sent_unless_the_route_says_json_object() -> None:
    body = structured(USER)
    sent = copy.deepcopy(body)
    for rules in (RouteRules(), resolve(RouteRuleKeys(), PROFILES["deepseek"])):
        changed, context = apply(ResponseFormatDowngraded(), body, rules)
        assert (changed, dict(context.tally.repairs), body) == (False, {}, sent)
    keyed = resolve(RouteRuleKeys(response_format_schema="json_object"), PROFILES["generic"])
    assert keyed.response_format_schema == "json_object"
    assert "response_format_schema" not in keyed.learnable
    assert "response_format_schema" in RouteRules().learnable


def test_in_the_request_phase_the_message_rules_see_the_instruction() -> None:
    """Before MessageShapeRepair: a developer message the instruction joined goes up as the
    leading system message where the upstream knows no developer role."""
    body = structured({"role": "developer", "content": "Be brief."}, USER)
    rules = resolve(
        RouteRuleKeys(response_format_schema="json_object", developer_role="system"),
        PROFILES["generic"],
    )
    _, forwarded, tally, changed = exchange(body, rules)
    assert changed
    assert forwarded.body["messages"] == [
        {"role": "system", "content": "Be brief.\n\n" + SAID},
        USER,
    ]
    assert tally.repairs[DOWNGRADED_KIND] == tally.repairs["role_developer_to_system"] == 1
