"""The request rules' refusals (proxy/learning/refusal_rules.py) and the reader of every error
shape (proxy/learning/error_messages.py): each text calls for its rule in each shape an upstream
sends it in, and only for a request carrying what it names."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from proxy.learning.error_messages import error_messages
from proxy.learning.parameter_fallback import PARAMETERS
from proxy.learning.refusal_rules import REQUEST_RULES, rule_for
from proxy.repair.profiles import PROFILES
from proxy.repair.rules import RouteRuleKeys, RouteRules, resolve

DEVELOPER = {"messages": [{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}]}
TOOLS = {"messages": [], "tools": [{"type": "function", "function": {"name": "a.b"}}]}
STRUCTURED = {
    "messages": [{"role": "user", "content": "y"}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": {}}},
}
FORCED = {
    "messages": [{"role": "user", "content": "y"}],
    "tools": [{"type": "function", "function": {"name": "StructuredOutput"}}],
    "tool_choice": {"type": "function", "function": {"name": "StructuredOutput"}},
    "reasoning_effort": "high",
}
MARKED = {
    "messages": [
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ],
        },
        {"role": "user", "content": "y"},
    ]
}

# The issue's and the reports' own words, each with the rule it calls for.
TEXTS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        'Invalid JSON payload received. Unknown name "additionalProperties" at '
        "'tools[0].function_declarations[0].parameters': Cannot find field.",
        TOOLS,
        "schema_dialect",
        "gemini",
    ),
    (
        'Invalid JSON payload received. Unknown name "type" at '
        "'tools[0].function_declarations[0].parameters.properties[0].value': Proto field is not "
        "repeating, cannot start list.",
        TOOLS,
        "schema_dialect",
        "gemini",
    ),
    (
        "tools.function.parameters is not a valid moonshot flavored json schema, details: "
        "<At path 'properties.mode': type is not defined>",
        TOOLS,
        "schema_dialect",
        "moonshot",
    ),
    (
        "* GenerateContentRequest.tools[0].function_declarations[0].name: Invalid function name. "
        "Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), "
        "underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 64.",
        TOOLS,
        "tool_names",
        "gemini",
    ),
    (
        "Invalid 'tools[0].function.name': string does not match pattern. Expected a string "
        "that matches the pattern '^[a-zA-Z0-9_-]+$'.",
        TOOLS,
        "tool_names",
        "openai",
    ),
    (
        "Failed to deserialize the JSON body into the target type: messages[0].role: unknown "
        "variant `developer`, expected one of `system`, `user`, `assistant`, `tool` at line 1 "
        "column 40",
        DEVELOPER,
        "developer_role",
        "system",
    ),
    (
        "This response_format type is unavailable now",
        STRUCTURED,
        "response_format_schema",
        "json_object",
    ),
    (
        "Failed to deserialize the JSON body into the target type: response_format: "
        "response_format.type `json_schema` is unavailable now at line 1 column 1193",
        STRUCTURED,
        "response_format_schema",
        "json_object",
    ),
    (
        "This model does not support response format `json_schema`. See supported models at "
        "https://console.groq.com/docs/structured-outputs#supported-models",
        STRUCTURED,
        "response_format_schema",
        "json_object",
    ),
    (
        "<400> InternalError.Algo.InvalidParameter: The tool_choice parameter does not support "
        "being set to required or object in thinking mode",
        FORCED,
        "forced_tool_choice",
        "unforced",
    ),
    ("Thinking mode does not support this tool_choice", FORCED, "forced_tool_choice", "unforced"),
    (
        "tool_choice 'specified' is incompatible with thinking enabled",
        FORCED,
        "forced_tool_choice",
        "unforced",
    ),
    (
        'litellm.BadRequestError: AnthropicException - {"type":"error","error":{"type":'
        '"invalid_request_error","message":"Thinking may not be enabled when tool_choice forces '
        'tool use."}}',
        FORCED,
        "forced_tool_choice",
        "without_thinking",
    ),
    (
        "'messages.0' : for 'role:system' the following must be satisfied[('messages.0' : "
        "property 'cache_control' is unsupported)]",
        MARKED,
        "cache_control",
        "dropped",
    ),
    (
        "messages.0.content.0.text.cache_control: Extra inputs are not permitted",
        MARKED,
        "cache_control",
        "dropped",
    ),
    (
        "Failed to deserialize the JSON body into the target type: messages[0]: invalid type: "
        "sequence, expected a string at line 1 column 42",
        MARKED,
        "cache_control",
        "dropped",
    ),
    (
        "'messages.0' : for 'role:system' the following must be satisfied[('messages.0.content' "
        ": value must be a string)]",
        MARKED,
        "cache_control",
        "dropped",
    ),
    (
        "system.0.cache_control.ttl: Extra inputs are not permitted",
        MARKED,
        "cache_control",
        "without_ttl",
    ),
    (
        "Extended TTL prompt caching is only supported for Anthropic models",
        MARKED,
        "cache_control",
        "without_ttl",
    ),
]


def google(message: str) -> str:
    return orjson.dumps(
        [{"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}]
    ).decode()


def openai(message: str) -> str:
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}}).decode()


def openrouter(message: str) -> str:
    raw = google(message)
    error = {"message": "Provider returned error", "code": 400, "metadata": {"raw": raw}}
    return orjson.dumps({"error": error}).decode()


@pytest.mark.parametrize("shape", [str, google, openai, openrouter])
@pytest.mark.parametrize(("text", "request_", "key", "value"), TEXTS)
def test_each_text_calls_for_its_rule_in_every_error_shape(
    shape: Any, text: str, request_: dict[str, Any], key: str, value: str
) -> None:
    rule = rule_for(400 if key != "developer_role" else 422, shape(text), request_)
    assert rule is not None and (rule.key, rule.value) == (key, value)
    assert rule.kind == f"{key}_learned"


@pytest.mark.parametrize(("text", "request_", "key", "value"), TEXTS)
def test_no_rule_for_another_status_or_a_request_without_what_it_names(
    text: str, request_: dict[str, Any], key: str, value: str
) -> None:
    for status in (401, 404, 429, 500, 503):
        assert rule_for(status, text, request_) is None
    assert rule_for(400, text, {"messages": [{"role": "user", "content": "y"}]}) is None


def test_pydantic_detail_lists_read_with_their_place() -> None:
    detail = {
        "type": "literal_error",
        "loc": ["body", "messages", 0, "role"],
        "msg": "Input should be 'system', 'user', 'assistant' or 'tool'",
    }
    body = orjson.dumps({"object": "error", "message": {"detail": [detail]}}).decode()
    assert error_messages(body) == (
        "messages[0].role: Input should be 'system', 'user', 'assistant' or 'tool' (literal_error)",
    )
    rule = rule_for(422, body, DEVELOPER)
    assert rule is not None and rule.key == "developer_role"


def test_a_json_schema_refused_in_any_words_is_not_a_parameter_to_drop() -> None:
    """The parameters rule is tried first: none of these names `response_format` to drop, so
    the format is downgraded, not lost."""
    detail = {
        "type": "literal_error",
        "loc": ["body", "response_format", "type"],
        "msg": "Input should be 'text' or 'json_object'",
    }
    pydantic = orjson.dumps({"detail": [detail]}).decode()
    texts = [text for text, _, key, _ in TEXTS if key == "response_format_schema"]
    for text in [*texts, pydantic]:
        for status in (400, 422):
            rule = rule_for(status, openai(text) if text != pydantic else text, STRUCTURED)
            assert rule is not None and rule.key == "response_format_schema"
            assert PARAMETERS.detect(text, STRUCTURED) == ()
        json_mode = {**STRUCTURED, "response_format": {"type": "json_object"}}
        assert rule_for(400, text, json_mode) is None  # refused in JSON mode: nothing to do


def test_plain_text_and_lm_studio_strings_are_messages() -> None:
    assert error_messages("messages[0]: unknown role: developer\n") == (
        "messages[0]: unknown role: developer",
    )
    assert error_messages('{"error": "Invalid content"}') == ("Invalid content",)
    assert error_messages("[not json") == ("[not json",)


def test_an_explicit_key_is_not_learnable_and_auto_is() -> None:
    rules = resolve(RouteRuleKeys(tool_names="none", developer_role="keep"), PROFILES["generic"])
    assert "tool_names" not in rules.learnable and "developer_role" not in rules.learnable
    assert "schema_dialect" in rules.learnable
    by_key = {(rule.key, rule.value): rule for rule in REQUEST_RULES}
    assert not by_key["tool_names", "gemini"].learns(rules)
    assert by_key["schema_dialect", "gemini"].learns(rules)


def test_a_rule_the_profile_already_applies_is_not_learned_again() -> None:
    rules = resolve(RouteRuleKeys(), PROFILES["gemini"])
    by_key = {(rule.key, rule.value): rule for rule in REQUEST_RULES}
    assert not by_key["schema_dialect", "gemini"].learns(rules)
    assert by_key["schema_dialect", "moonshot"].learns(rules)


def test_adjust_sets_the_key_and_only_for_its_own_memory_key() -> None:
    rules = RouteRules()
    by_key = {(rule.key, rule.value): rule for rule in REQUEST_RULES}
    merged = by_key["system_messages", "merged"]
    adjusted = merged.adjust(rules, frozenset({merged.memory_key}))
    assert adjusted == replace(rules, messages=replace(rules.messages, system_messages="merged"))
    assert merged.adjust(rules, frozenset({"tool_names:gemini"})) is rules
    names = by_key["tool_names", "openai"]
    assert names.adjust(rules, frozenset({names.memory_key})).tool_names == "openai"


def test_a_forced_choice_refused_calls_for_nothing_when_nothing_forces_or_thinking_is_off() -> None:
    by_key = {(rule.key, rule.value): rule for rule in REQUEST_RULES}
    unforced, unthinking = (
        by_key["forced_tool_choice", "unforced"],
        by_key["forced_tool_choice", "without_thinking"],
    )
    for choice in ("auto", "none", None):
        request = {**FORCED, "tool_choice": choice}
        assert not unforced.carries(request) and not unthinking.carries(request)
    assert unforced.carries({**FORCED, "tool_choice": "required"})
    # DeepSeek V4 thinks with no parameter asking: the choice is still what to unforce...
    bare = {key: value for key, value in FORCED.items() if key != "reasoning_effort"}
    assert unforced.carries(bare)
    # ... but there is no thinking parameter to leave out.
    assert not unthinking.carries(bare)
    for off in (
        {"thinking": {"type": "disabled"}},
        {"enable_thinking": False},
        {"reasoning_effort": "none"},
        {"chat_template_kwargs": {"enable_thinking": False}},
    ):
        assert not unforced.carries({**bare, **off}), off
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}}
    assert unforced.carries({**FORCED, "tool_choice": allowed})
    assert not unforced.carries({**FORCED, "tool_choice": {**allowed, "allowed_tools": {}}})


def test_a_text_that_names_a_message_calls_for_the_marks_only_when_that_one_is_marked() -> None:
    """DeepSeek's and Groq's words for content parts where a string goes name the message: a
    marked system prompt's is the marks' to drop; a tool result the client sent as parts is
    the tool content rule's, as before marks were carried."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    parts = [{"type": "text", "text": "sunny"}]
    request = {
        "messages": [
            *MARKED["messages"],
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": parts},
        ]
    }
    serde = (
        "Failed to deserialize the JSON body into the target type: messages[{}]: invalid "
        "type: sequence, expected a string at line 1 column 9"
    )
    groq = (
        "'messages.{0}' : for 'role:system' the following must be satisfied"
        "[('messages.{0}.content' : value must be a string)]"
    )
    for text in (serde, groq):
        marks = rule_for(400, openai(text.format(0)), request)
        assert marks is not None and (marks.key, marks.value) == ("cache_control", "dropped")
    tool = rule_for(400, openai(serde.format(3)), request)
    assert tool is not None and tool.key == "tool_content"
    assert rule_for(400, openai(groq.format(3)), request) is None
    unmarked = {
        "messages": [{"role": "system", "content": parts}, {"role": "user", "content": "y"}]
    }
    assert rule_for(400, serde.format(0), unmarked) is None


def test_a_ttl_refusal_needs_a_ttl_and_a_mark_refusal_any_mark() -> None:
    no_ttl = orjson.loads(orjson.dumps(MARKED))
    del no_ttl["messages"][0]["content"][0]["cache_control"]["ttl"]
    assert (
        rule_for(400, "system.0.cache_control.ttl: Extra inputs are not permitted", no_ttl) is None
    )
    detail = {
        "type": "extra_forbidden",
        "loc": ["body", "messages", 0, "content", 0, "cache_control", "ttl"],
        "msg": "Extra inputs are not permitted",
    }
    ttl = rule_for(422, orjson.dumps({"detail": [detail]}).decode(), MARKED)
    assert ttl is not None and ttl.value == "without_ttl"
    whole = {**detail, "loc": detail["loc"][:-1]}
    dropped = rule_for(422, orjson.dumps({"detail": [whole]}).decode(), no_ttl)
    assert dropped is not None and dropped.value == "dropped"
