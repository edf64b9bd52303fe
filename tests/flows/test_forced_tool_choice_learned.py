"""A forced tool choice an upstream refuses in thinking mode, learned from its refusal through
the real proxy under uvicorn with no configuration, by the real clients of each door: the
Anthropic SDK on Messages with Claude Code's side-request shape (adaptive thinking at effort
"high", which the front sends as `reasoning_effort`, and a tool forced by name: structured
output), openai-python on chat completions (`tool_choice="required"`) and on the Responses API.

The upstream is RefusingUpstream (tests/support/refusing_upstream.py) on 127.0.0.1, model "m",
refusing as DashScope (Qwen), DeepSeek V4, Kimi, or a LiteLLM gateway in front of Anthropic
does, with their real bodies (tests/support/limit_upstreams.py), and otherwise answering a
request whose last message is the user's with a call of its first tool. The first request is
refused once and sent once more as its refusal's words call for: the choice as "auto" (the
three that name the tool choice), or the thinking parameters left out (Anthropic's, which names
the thinking); the next goes that way at once, one send. Counted apart: `tool_choice_unforced`,
`thinking_dropped_for_tool_choice`. A request that turns thinking off is sent as it came; a key
set explicitly is never learned over; two proxies sharing a real Redis learn it once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
import redis

from tests.support.limit_upstreams import (
    dashscope_forced_tool,
    deepseek_forced_tool,
    kimi_forced_tool,
    litellm_anthropic_forced_tool,
)
from tests.support.proxies import running_proxy
from tests.support.redis_server import started_redis_server
from tests.support.refusing_upstream import (
    ARGUMENTS,
    RefusingUpstream,
    running_refusing_upstream,
)
from tests.support.waiting import wait_until

TITLE_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
QUESTION = "Which file did the user ask about? Answer with the StructuredOutput tool."


def counted(headers: Any) -> dict[str, int]:
    said = headers.get("x-streamfix-repairs", "none")
    if said == "none":
        return {}
    return {kind: int(n) for kind, n in (item.split(":") for item in said.split(","))}


def claude_code_side(proxy: str) -> tuple[dict[str, int], list[tuple[str, Any]]]:
    """Claude Code's structured side request as its SDK sends it: streamed, `max_tokens`
    32000, adaptive thinking at effort "high", one tool forced by name."""
    client = anthropic.Anthropic(base_url=proxy, api_key="sk-test", max_retries=0)
    with client.messages.stream(
        model="m",
        max_tokens=32000,
        system=[{"type": "text", "text": "You answer with the StructuredOutput tool."}],
        messages=[{"role": "user", "content": QUESTION}],
        thinking={"type": "adaptive"},
        output_config={"effort": "high"},
        tools=[
            {
                "name": "StructuredOutput",
                "description": "Return the answer as structured output.",
                "input_schema": TITLE_SCHEMA,
            }
        ],
        tool_choice={"type": "tool", "name": "StructuredOutput"},
    ) as stream:
        answer = stream.get_final_message()
        headers = stream.response.headers
    assert answer.stop_reason == "tool_use"
    return counted(headers), [(b.name, b.input) for b in answer.content if b.type == "tool_use"]


TOOLS: Any = [
    {"type": "function", "function": {"name": "StructuredOutput", "parameters": TITLE_SCHEMA}}
]


def chat_required(proxy: str, **extra: Any) -> tuple[dict[str, int], list[tuple[str, Any]]]:
    client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-test", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": QUESTION}],
        tools=TOOLS,
        tool_choice="required",
        **extra,
    )
    calls = raw.parse().choices[0].message.tool_calls or []
    return counted(raw.headers), [(c.function.name, c.function.arguments) for c in calls]


def responses_required(proxy: str) -> tuple[dict[str, int], list[tuple[str, Any]]]:
    client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-test", max_retries=0)
    raw = client.responses.with_raw_response.create(
        model="m",
        input=QUESTION,
        tools=[
            {
                "type": "function",
                "name": "StructuredOutput",
                "parameters": TITLE_SCHEMA,
                "strict": False,
            }
        ],
        tool_choice="required",
        reasoning={"effort": "high"},
    )
    calls = [item for item in raw.parse().output if item.type == "function_call"]
    return counted(raw.headers), [(c.name, c.arguments) for c in calls]


UNFORCED = {"forced_tool_choice_learned": 1, "tool_choice_unforced": 1}
CASES = {
    # Claude Code's side request through the Messages front, to Qwen on DashScope.
    "messages_dashscope": (claude_code_side, dashscope_forced_tool, "unforced"),
    # DeepSeek V4 thinks with no parameter asking: "required" from a chat client.
    "chat_deepseek": (chat_required, deepseek_forced_tool, "unforced"),
    "responses_kimi": (responses_required, kimi_forced_tool, "unforced"),
    # Anthropic's words name the thinking: the forced choice stays, `reasoning_effort` goes.
    "messages_litellm_anthropic": (
        claude_code_side,
        litellm_anthropic_forced_tool,
        "without_thinking",
    ),
}


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[RefusingUpstream, str]]:
    fake = RefusingUpstream(request.param)
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        yield fake, proxy


@pytest.mark.parametrize(
    ("case", "served"), [(name, case[1]) for name, case in CASES.items()], indirect=["served"]
)
def test_the_refusal_is_learned_after_one_resend_and_applied_up_front(
    served: tuple[RefusingUpstream, str], case: str
) -> None:
    fake, proxy = served
    ask, _, value = CASES[case]
    first, calls = ask(proxy)
    later, again = ask(proxy)
    assert fake.refused() == [True, False, False]  # one refused send, then right every time
    refused, resent, remembered = fake.bodies()
    assert resent == remembered
    expected = ARGUMENTS if ask is claude_code_side else '{"path":"a.txt"}'
    assert calls == again == [("StructuredOutput", expected)]
    if value == "unforced":
        assert first == UNFORCED
        assert later == {"tool_choice_unforced": 1}
        assert resent["tool_choice"] == "auto"
        assert resent == {**refused, "tool_choice": "auto"}  # thinking and all else as asked
        assert refused["tool_choice"] != "auto"
    else:
        assert first == {"forced_tool_choice_learned": 1, "thinking_dropped_for_tool_choice": 1}
        assert later == {"thinking_dropped_for_tool_choice": 1}
        assert refused["reasoning_effort"] == "high"
        assert resent == {k: v for k, v in refused.items() if k != "reasoning_effort"}
        assert resent["tool_choice"] == {
            "type": "function",
            "function": {"name": "StructuredOutput"},
        }


def test_a_request_that_turns_thinking_off_keeps_its_forced_choice() -> None:
    """DeepSeek takes a forced choice with thinking disabled: once the unforcing is learned, a
    request saying `thinking: {"type": "disabled"}` still goes up forced, as it came."""
    fake = RefusingUpstream(deepseek_forced_tool)
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        assert chat_required(proxy)[0] == UNFORCED
        off = {"extra_body": {"thinking": {"type": "disabled"}}}
        shown, calls = chat_required(proxy, **off)
    assert shown == {}
    assert calls == [("StructuredOutput", '{"path":"a.txt"}')]
    assert fake.refused() == [True, False, False]
    assert fake.bodies()[2]["tool_choice"] == "required"


def test_a_key_set_explicitly_is_never_learned_over() -> None:
    fake = RefusingUpstream(dashscope_forced_tool)
    with (
        running_refusing_upstream(fake) as base_url,
        running_proxy(base_url, **{"upstream.forced_tool_choice": "as_sent"}) as proxy,
    ):
        client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-test", max_retries=0)
        for _ in range(2):
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": QUESTION}],
                    tools=TOOLS,
                    tool_choice="required",
                )
            assert "thinking mode" in str(refused.value)
    assert fake.refused() == [True, True]  # each request sent once, as it came


def test_a_second_refusal_reaches_the_client_as_it_came() -> None:
    """An upstream refusing the choice in DeepSeek's words and "auto" in Anthropic's: the one
    resend's refusal is the client's, and nothing goes a third time."""

    def refuses(body: dict[str, Any], raw: bytes) -> Any:
        if body.get("tool_choice") == "auto":
            return litellm_anthropic_forced_tool({**body, "tool_choice": "required"}, raw)
        return deepseek_forced_tool(body, raw)

    fake = RefusingUpstream(refuses)
    with (
        running_refusing_upstream(fake) as base_url,
        running_proxy(base_url) as proxy,
        pytest.raises(openai.BadRequestError) as refused,
    ):
        chat_required(proxy, reasoning_effort="high")
    assert len(fake.received) == 2
    assert "Thinking may not be enabled" in str(refused.value)


def test_two_proxies_sharing_a_redis_learn_it_once() -> None:
    fake = RefusingUpstream(dashscope_forced_tool)
    with running_refusing_upstream(fake) as base_url:
        for server in started_redis_server():
            fake.received.clear()
            config = {"receipts.store": server.url}
            with running_proxy(base_url, **config) as proxy_a:
                assert claude_code_side(proxy_a)[0] == UNFORCED
            client = redis.Redis.from_url(server.url)
            try:
                wait_until(
                    lambda c=client: list(c.scan_iter(match="streamfix:learned:*")),
                    "the learned rule in redis",
                )
                keys = list(client.scan_iter(match="streamfix:learned:*"))
            finally:
                client.close()
            assert len(keys) == 1 and keys[0].endswith(b":forced_tool_choice:unforced")
            with running_proxy(base_url, **config) as proxy_b:
                assert claude_code_side(proxy_b)[0] == {"tool_choice_unforced": 1}
            assert fake.refused() == [True, False, False]  # proxy B sent it right at once
