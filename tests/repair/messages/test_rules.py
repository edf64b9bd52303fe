"""Each message rule on its own: what it rewrites, what it leaves, and what it counts."""

from __future__ import annotations

import copy
import re
from typing import Any

import orjson

from proxy.repair.messages.assistant_content import AssistantContentNormalised
from proxy.repair.messages.developer_role import DeveloperToSystem
from proxy.repair.messages.nine_alnum_ids import NineAlnumCallIds, _mapping, nine_alnum
from proxy.repair.messages.system_merge import SystemMessagesMerged
from proxy.repair.messages.tool_content import ToolContentFlattened
from proxy.repair.profiles import PROFILES, MessageRules, profile_for
from proxy.repair.repairs.message_shapes import MessageShapeRepair
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.routing.routes import Router
from proxy.settings.schema import ConfigError, Settings
from tests.support.phases import apply

NINE = re.compile(r"[A-Za-z0-9]{9}")


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def turn(*ids: str, content: Any = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [call(i) for i in ids]}


def result(call_id: str, content: Any = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


USER = {"role": "user", "content": "hi"}


# ── developer → system ───────────────────────────────────────────────────────


def test_developer_messages_become_system_and_nothing_else_changes() -> None:
    messages = [{"role": "developer", "content": "Be brief.", "name": "x"}, USER]
    assert DeveloperToSystem().apply(messages) == 1
    assert messages == [{"role": "system", "content": "Be brief.", "name": "x"}, USER]
    assert DeveloperToSystem().apply(messages) == 0


# ── system messages merged ───────────────────────────────────────────────────


def test_several_and_late_system_messages_become_one_leading_message_in_order() -> None:
    messages = [
        {"role": "system", "content": "You are opencode."},
        {"role": "system", "content": [{"type": "text", "text": "Env: linux"}]},
        USER,
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "Summarise the above."},
        {"role": "user", "content": "go"},
    ]
    assert SystemMessagesMerged().apply(messages) == 2
    assert messages[0] == {
        "role": "system",
        "content": "You are opencode.\n\nEnv: linux\n\nSummarise the above.",
    }
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1:] == [USER, {"role": "assistant", "content": "hello"}, messages[3]]


def test_a_single_late_system_message_moves_first() -> None:
    messages = [USER, {"role": "system", "content": "late"}]
    assert SystemMessagesMerged().apply(messages) == 1
    assert messages == [{"role": "system", "content": "late"}, USER]


def test_one_leading_system_message_or_none_is_left_and_so_is_non_text() -> None:
    for messages in ([{"role": "system", "content": "s"}, USER], [USER]):
        before = copy.deepcopy(messages)
        assert SystemMessagesMerged().apply(messages) == 0 and messages == before
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    messages = [USER, {"role": "system", "content": [image]}]
    assert SystemMessagesMerged().apply(messages) == 0 and messages[0] == USER


# ── assistant content beside tool calls ──────────────────────────────────────


def test_null_wanted_an_empty_content_beside_calls_becomes_null() -> None:
    messages = [turn("a", content=""), turn("b", content=[]), turn("c", content="text")]
    messages.append({"role": "assistant", "content": ""})  # no calls: left
    assert AssistantContentNormalised("null").apply(messages) == 2
    assert [m["content"] for m in messages] == [None, None, "text", ""]


def test_empty_wanted_a_null_or_missing_content_beside_calls_becomes_empty() -> None:
    missing = turn("b")
    del missing["content"]
    messages = [turn("a"), missing, turn("c", content="text"), {"role": "assistant"}]
    assert AssistantContentNormalised("empty").apply(messages) == 2
    assert [m.get("content") for m in messages] == ["", "", "text", None]


# ── tool content flattened ───────────────────────────────────────────────────


def test_text_parts_of_a_tool_result_become_one_string() -> None:
    parts = [{"type": "text", "text": "<reminder>"}, {"type": "text", "text": "42"}]
    image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    messages = [
        result("a", parts),
        result("b", image),
        result("c"),
        {"role": "user", "content": parts},
    ]
    assert ToolContentFlattened().apply(messages) == 1
    assert messages[0]["content"] == "<reminder>\n42"
    assert messages[1]["content"] == image and messages[3]["content"] == parts


# ── call ids mapped to nine alphanumerics ────────────────────────────────────


def test_ids_are_mapped_together_and_the_same_in_every_later_request() -> None:
    first = [USER, turn("call_abc", "toolu_01XyZ"), result("call_abc"), result("toolu_01XyZ")]
    assert NineAlnumCallIds().apply(first) == 2
    mapped = [c["id"] for c in first[1]["tool_calls"]]
    assert all(NINE.fullmatch(i) for i in mapped) and len(set(mapped)) == 2
    assert [first[2]["tool_call_id"], first[3]["tool_call_id"]] == mapped
    assert mapped == [nine_alnum("call_abc"), nine_alnum("toolu_01XyZ")]
    # The next turn: the client's own ids again, plus Mistral's, which stays as it came.
    later = [USER, turn("call_abc", "toolu_01XyZ"), result("call_abc"), result("toolu_01XyZ")]
    later += [turn("Kp3xW9qZ2"), result("Kp3xW9qZ2")]
    assert NineAlnumCallIds().apply(later) == 2
    assert [c["id"] for c in later[1]["tool_calls"]] == mapped
    assert later[4]["tool_calls"][0]["id"] == "Kp3xW9qZ2" == later[5]["tool_call_id"]


def test_a_mapping_never_takes_an_id_already_in_the_request() -> None:
    native = nine_alnum("call_1")  # a native id that happens to be call_1's mapping
    mapping = _mapping(["call_1", native, "call_2"])
    assert native not in mapping and mapping["call_1"] == nine_alnum("call_1", 1)
    assert len(set(mapping.values()) | {native}) == 3


def test_ids_that_are_nine_alphanumerics_are_left() -> None:
    messages = [USER, turn("abcDEF123"), result("abcDEF123")]
    before = copy.deepcopy(messages)
    assert NineAlnumCallIds().apply(messages) == 0 and messages == before


# ── the chain link, the profiles and the routes ──────────────────────────────


def run(rules: MessageRules, body: dict[str, Any]) -> tuple[bool, Tally]:
    changed, context = apply(MessageShapeRepair(), body, RouteRules(messages=rules))
    return changed, context.tally


ALL_ON = MessageRules("system", "merged", "null", "string", "nine_alnum")


def test_the_rules_run_in_order_and_each_change_is_counted() -> None:
    parts = [{"type": "text", "text": "sunny"}]
    body = {
        "messages": [
            {"role": "system", "content": "A"},
            USER,
            {"role": "developer", "content": "B"},  # becomes system first, then merged
            turn("call_1", content=""),
            result("call_1", parts),
        ]
    }
    changed, exchange = run(ALL_ON, body)
    assert changed
    assert body["messages"][0] == {"role": "system", "content": "A\n\nB"}
    assert body["messages"][2]["content"] is None and body["messages"][3]["content"] == "sunny"
    assert body["messages"][2]["tool_calls"][0]["id"] == body["messages"][3]["tool_call_id"]
    assert dict(exchange.repairs) == {
        "role_developer_to_system": 1,
        "system_messages_merged": 1,
        "assistant_content_normalised": 1,
        "tool_content_flattened": 1,
        "tool_call_id_mapped": 1,
    }


def test_a_request_no_rule_applies_to_is_left_byte_for_byte() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "A"},
            USER,
            turn("abcDEF123"),
            result("abcDEF123"),
        ]
    }
    raw = orjson.dumps(body)
    changed, exchange = run(ALL_ON, body)
    assert not changed and orjson.dumps(body) == raw and exchange.summary() == "none"
    developer = {"messages": [{"role": "developer", "content": "x"}, turn("call_1", content="")]}
    raw = orjson.dumps(developer)
    changed, exchange = run(MessageRules(), developer)  # every rule off: nothing applies
    assert not changed and orjson.dumps(developer) == raw and exchange.summary() == "none"


def test_profiles_carry_the_rules_of_their_upstreams() -> None:
    mistral = profile_for("auto", "https://api.mistral.ai/v1")
    assert mistral.name == "mistral"
    assert mistral.messages == MessageRules(
        developer_role="system", assistant_tool_content="null", tool_call_ids="nine_alnum"
    )
    assert PROFILES["deepseek"].messages.developer_role == "system"
    assert PROFILES["kimi"].messages.tool_content == "string"
    for name in ("openai", "generic", "gemini", "openrouter", "vllm"):
        assert PROFILES[name].messages == MessageRules(), name


def test_a_route_sets_each_rule_or_takes_the_profiles() -> None:
    settings = Settings().with_values(
        {
            "upstream.base_url": "https://api.mistral.ai/v1",
            "upstream.developer_role": "keep",
            "routes": [
                {
                    "name": "qwen",
                    "models": ["qwen*"],
                    "base_url": "http://127.0.0.1:9/v1",
                    "system_messages": "merged",
                    "assistant_tool_content": "empty",
                }
            ],
        }
    )
    router = Router(settings, {})
    default, qwen = router.default, router.route_for("qwen3.6")
    assert default.rules("m").messages == MessageRules(
        developer_role="keep", assistant_tool_content="null", tool_call_ids="nine_alnum"
    )
    assert qwen.rules("m").messages == MessageRules(
        system_messages="merged", assistant_tool_content="empty"
    )


def test_an_unknown_rule_value_is_refused() -> None:
    for key in ("developer_role", "system_messages", "tool_call_ids", "tool_content"):
        try:
            Settings().with_values({f"upstream.{key}": "sometimes"})
        except ConfigError as error:
            assert key in str(error)
        else:
            raise AssertionError(key)
