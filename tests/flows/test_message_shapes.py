"""Each message rule through the real proxy, in front of a fake that rejects what the real
upstream rejects (tests/support/message_upstreams.py): the client's request, sent straight to the
fake, is rejected with the upstream's error; through the proxy it is accepted. A request that
needs no rewrite reaches the fake byte for byte as the client sent it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest

from tests.support import message_upstreams as fakes
from tests.support.message_upstreams import MessageUpstream, serving
from tests.support.proxies import running_proxy

TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
]
USER = {"role": "user", "content": "weather in Paris?"}
AGAIN = {"role": "user", "content": "and tomorrow?"}


def call_turn(call_id: str, content: Any = None) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }


def result(call_id: str, content: Any = "sunny") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


@dataclass(frozen=True)
class Rule:
    name: str
    checkers: tuple[fakes.Checker, ...]
    config: dict[str, Any]
    rejected: list[dict[str, Any]]
    """A history the real upstream rejects."""
    error: bytes
    """A piece of the upstream's error body."""
    fine: list[dict[str, Any]]
    """A history it accepts as it is."""
    kind: str


RULES = [
    Rule(
        "deepseek_developer",
        (fakes.deepseek_roles,),
        {"upstream.profile": "deepseek"},
        [{"role": "developer", "content": "Be brief."}, USER],
        b"messages[0]: unknown role: developer at line 1 column",
        [{"role": "system", "content": "Be brief."}, USER],
        "role_developer_to_system",
    ),
    Rule(
        "mistral_developer",
        (fakes.mistral_roles,),
        {"upstream.profile": "mistral"},
        [{"role": "developer", "content": "Be brief."}, USER],
        b"Input should be 'system', 'user', 'assistant' or 'tool'",
        [{"role": "system", "content": "Be brief."}, USER],
        "role_developer_to_system",
    ),
    Rule(
        "qwen_system_merged",
        (fakes.qwen_template,),
        {"upstream.system_messages": "merged"},
        [
            {"role": "system", "content": "You are opencode."},
            {"role": "system", "content": "<env>linux</env>"},
            USER,
        ],
        b"System message must be at the beginning.",
        [{"role": "system", "content": "You are opencode."}, USER],
        "system_messages_merged",
    ),
    Rule(
        "mistral_content_null",
        (fakes.mistral_content,),
        {"upstream.profile": "mistral"},
        [USER, call_turn("Kp3xW9qZ2", ""), result("Kp3xW9qZ2"), AGAIN],
        b"Assistant message must have either content or tool_calls, but not both.",
        [USER, call_turn("Kp3xW9qZ2"), result("Kp3xW9qZ2"), AGAIN],
        "assistant_content_normalised",
    ),
    Rule(
        "lmstudio_content_empty",
        (fakes.lmstudio_content,),
        {"upstream.assistant_tool_content": "empty"},
        [USER, call_turn("call_1"), result("call_1"), AGAIN],
        b"'content' field must be a string or an array of objects.",
        [USER, call_turn("call_1", ""), result("call_1"), AGAIN],
        "assistant_content_normalised",
    ),
    Rule(
        "kimi_tool_content",
        (fakes.kimi_tool_content,),
        {"upstream.profile": "kimi"},
        [USER, call_turn("call_1"), result("call_1", [{"type": "text", "text": "sunny"}]), AGAIN],
        b"invalid type: sequence, expected a string",
        [USER, call_turn("call_1"), result("call_1"), AGAIN],
        "tool_content_flattened",
    ),
    Rule(
        "mistral_call_ids",
        (fakes.mistral_ids,),
        {"upstream.profile": "mistral"},
        [USER, call_turn("call_Z8bq2TnCk1YwA"), result("call_Z8bq2TnCk1YwA"), AGAIN],
        b"Tool call id was call_Z8bq2TnCk1YwA but must be a-z, A-Z, 0-9, with a length of 9.",
        [USER, call_turn("Kp3xW9qZ2"), result("Kp3xW9qZ2"), AGAIN],
        "tool_call_id_mapped",
    ),
]


def post(base: str, raw: bytes) -> httpx.Response:
    headers = {"content-type": "application/json", "authorization": "Bearer k"}
    return httpx.post(f"{base}/chat/completions", content=raw, headers=headers, timeout=30)


def body(messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"model": "m", "messages": messages, "tools": TOOLS})


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_the_upstream_rejects_the_request_and_takes_it_through_the_proxy(rule: Rule) -> None:
    upstream = MessageUpstream(rule.checkers)
    with serving(upstream) as base, running_proxy(base, **rule.config) as proxy:
        direct = post(base, body(rule.rejected))
        assert direct.status_code in (400, 422) and rule.error in direct.content
        through = post(f"{proxy}/v1", body(rule.rejected))
        assert through.status_code == 200, through.text
        assert through.headers["x-streamfix-repairs"].startswith(f"{rule.kind}:")
        sent = upstream.received[-1]
        assert all(checker(orjson.loads(sent), sent) is None for checker in rule.checkers)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_a_request_that_needs_no_rewrite_goes_up_byte_for_byte(rule: Rule) -> None:
    upstream = MessageUpstream(rule.checkers)
    raw = body(rule.fine)
    with serving(upstream) as base, running_proxy(base, **rule.config) as proxy:
        response = post(f"{proxy}/v1", raw)
        assert response.status_code == 200, response.text
        assert upstream.received == [raw]
        assert response.headers["x-streamfix-repairs"] == "none"


def test_what_the_merged_system_message_says() -> None:
    upstream = MessageUpstream((fakes.qwen_template,))
    messages = [
        {"role": "system", "content": "You are opencode."},
        USER,
        {"role": "assistant", "content": "Let me look."},
        {"role": "system", "content": "Summarise the above."},
        AGAIN,
    ]
    with (
        serving(upstream) as base,
        running_proxy(base, **{"upstream.system_messages": "merged"}) as proxy,
    ):
        assert post(f"{proxy}/v1", body(messages)).status_code == 200
    sent = orjson.loads(upstream.received[0])["messages"]
    assert sent == [
        {"role": "system", "content": "You are opencode.\n\nSummarise the above."},
        USER,
        {"role": "assistant", "content": "Let me look."},
        AGAIN,
    ]


def test_without_the_rule_the_proxy_sends_what_the_upstream_rejects() -> None:
    """The rules are data: the same Qwen request on a route that says not to merge fails
    (left "auto", the route learns the merge from this refusal: test_learned_request_rules)."""
    upstream = MessageUpstream((fakes.qwen_template,))
    messages = [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}, USER]
    as_sent = {"upstream.system_messages": "as_sent"}
    with serving(upstream) as base, running_proxy(base, **as_sent) as proxy:
        response = post(f"{proxy}/v1", body(messages))
    assert response.status_code == 400 and b"must be at the beginning" in response.content
    assert upstream.received == [body(messages)]
