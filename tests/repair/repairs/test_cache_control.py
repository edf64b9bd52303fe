"""CacheControlDropped: the prompt-cache marks go up as sent unless the route says otherwise;
without their `ttl`, or not at all, in which case the request is the one it would have been
without them (the Messages front's shapes, byte for byte)."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
import pytest

from proxy.fronts.messages.request import translate
from proxy.repair.profiles import PROFILES
from proxy.repair.repairs.cache_control import (
    DROPPED_KIND,
    TTL_DROPPED_KIND,
    CacheControlDropped,
    has_marks,
    has_ttl_marks,
    marked_parts_at,
)
from proxy.repair.rules import RouteRuleKeys, RouteRules, resolve
from tests.fronts.test_messages_request import (
    CLAUDE_CODE_BETAS,
    claude_code_request,
    without_marks,
)
from tests.support.phases import apply

HOUR = {"type": "ephemeral", "ttl": "1h"}
EPHEMERAL = {"type": "ephemeral"}


def repaired(body: dict[str, Any], rule: str) -> tuple[bool, dict[str, int]]:
    changed, context = apply(CacheControlDropped(), body, RouteRules(cache_control=rule))
    return changed, dict(context.tally.repairs)


def marked_chat() -> dict[str, Any]:
    """A chat request with marks everywhere OpenRouter reads them."""
    return {
        "model": "m",
        "messages": [
            {
                "role": "system",
                "content": [
                    {"type": "text", "text": "a", "cache_control": HOUR},
                    {"type": "text", "text": "b", "cache_control": EPHEMERAL},
                ],
            },
            {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": HOUR}]},
            {"role": "assistant", "content": "ok", "cache_control": EPHEMERAL},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "x"},
                    {"type": "text", "text": "y", "cache_control": EPHEMERAL},
                ],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "f"}, "cache_control": HOUR}],
    }


def test_dropped_takes_every_mark_off_and_gives_back_the_strings_they_needed_parts_for() -> None:
    body = marked_chat()
    assert repaired(body, "dropped") == (True, {DROPPED_KIND: 6})
    assert body == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "a\n\nb"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "ok"},
            # Several parts stay parts: that is how the request without marks sends them.
            {
                "role": "user",
                "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    }


def test_without_ttl_keeps_each_breakpoint_at_the_default_lifetime() -> None:
    body = marked_chat()
    assert repaired(body, "without_ttl") == (True, {TTL_DROPPED_KIND: 3})
    expected = marked_chat()
    expected["messages"][0]["content"][0]["cache_control"] = EPHEMERAL
    expected["messages"][1]["content"][0]["cache_control"] = EPHEMERAL
    expected["tools"][0]["cache_control"] = EPHEMERAL
    assert body == expected
    assert repaired(body, "without_ttl") == (False, {})  # no ttl left: nothing to do


@pytest.mark.parametrize("rule", ["as_sent", "without_ttl", "dropped"])
def test_a_request_without_marks_is_never_touched(rule: str) -> None:
    body = without_marks(marked_chat())
    sent = copy.deepcopy(body)
    assert repaired(body, rule) == (False, {})
    assert body == sent


def test_as_sent_keeps_every_mark() -> None:
    body = marked_chat()
    assert repaired(body, "as_sent") == (False, {})
    assert body == marked_chat()


def test_claude_codes_request_dropped_is_byte_for_byte_the_one_without_marks() -> None:
    """What a learned drop resends is what an upstream that refuses marks took before they
    were carried: the Messages front's translation of the request without them."""
    marked = translate(claude_code_request(), {"anthropic-beta": CLAUDE_CODE_BETAS}).body
    assert has_marks(marked) and not has_ttl_marks(marked)
    assert marked_parts_at(marked, 0) and not marked_parts_at(marked, 4)
    assert repaired(marked, "dropped") == (True, {DROPPED_KIND: 3})
    unmarked = translate(
        without_marks(claude_code_request()), {"anthropic-beta": CLAUDE_CODE_BETAS}
    )
    assert orjson.dumps(marked) == orjson.dumps(unmarked.body)


def test_a_messages_request_with_every_kind_of_mark_dropped_is_the_one_without() -> None:
    call = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "Read",
        "input": {},
        "cache_control": EPHEMERAL,
    }
    pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"},
        "cache_control": HOUR,
    }
    given = {
        "model": "m",
        "max_tokens": 10,
        "system": [
            {"type": "text", "text": "s1"},
            {"type": "text", "text": "s2", "cache_control": HOUR},
        ],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "q", "cache_control": EPHEMERAL}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}, call]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [pdf],
                        "cache_control": EPHEMERAL,
                    },
                    {"type": "text", "text": "and?", "cache_control": EPHEMERAL},
                ],
            },
        ],
        "tools": [{"name": "Read", "input_schema": {"type": "object"}, "cache_control": HOUR}],
    }
    marked = translate(given).body
    assert repaired(marked, "dropped")[0]
    assert json.dumps(marked) == json.dumps(translate(without_marks(given)).body)


def test_the_profiles_of_hosts_that_refuse_marks_drop_them_and_a_set_key_wins() -> None:
    for name in ("deepseek", "groq", "cerebras"):
        assert resolve(RouteRuleKeys(), PROFILES[name]).cache_control == "dropped", name
    for name in ("openrouter", "generic", "openai", "gemini"):
        assert resolve(RouteRuleKeys(), PROFILES[name]).cache_control == "as_sent", name
    keyed = resolve(RouteRuleKeys(cache_control="as_sent"), PROFILES["deepseek"])
    assert keyed.cache_control == "as_sent" and "cache_control" not in keyed.learnable
    assert "cache_control" in RouteRules().learnable
