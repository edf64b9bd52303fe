"""A schema the upstream refuses, learned from its refusal, through the proxy with no
configuration, run by real clients in a two-turn tool flow: the OpenAI Python SDK (create,
then the tool's result sent back) and the Vercel AI SDK's own agent loop (`execute`,
`stopWhen`), streamed and not.

The upstream is tests/support/refusing_upstream.py on 127.0.0.1 with model "m" (the generic
profile: nothing says it is Gemini) refusing a tool schema as Gemini does, with Gemini's 400
(`Unknown name "additionalProperties" at 'tools[0].function_declarations[0].parameters':
Cannot find field.`). The client must see no error: the first request is refused once and sent
again in Gemini's dialect, and the follow-up goes in that dialect at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.clients.vercel import run_vercel_agent
from tests.support.proxies import running_proxy
from tests.support.refusing_upstream import (
    ANSWER_PREFIX,
    ARGUMENTS,
    RefusingUpstream,
    gemini_schemas,
    running_refusing_upstream,
)

READ = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}


@pytest.fixture
def served() -> Iterator[tuple[RefusingUpstream, str]]:
    fake = RefusingUpstream(gemini_schemas)
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        yield fake, f"{proxy}/v1"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_the_openai_sdk_runs_two_turns_on_an_upstream_refusing_its_schema(
    served: tuple[RefusingUpstream, str], stream: bool
) -> None:
    fake, base_url = served
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=30)
    tools: Any = [{"type": "function", "function": {"name": "read", "parameters": READ}}]
    messages: list[Any] = [{"role": "user", "content": "read a.txt"}]

    def ask() -> tuple[str, list[Any]]:
        if not stream:
            message = client.chat.completions.create(model="m", messages=messages, tools=tools)
            return message.choices[0].message.content or "", list(
                message.choices[0].message.tool_calls or ()
            )
        with client.chat.completions.stream(model="m", messages=messages, tools=tools) as s:
            final = s.get_final_completion().choices[0].message
        return final.content or "", list(final.tool_calls or ())

    _, calls = ask()
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("read", '{"path":"a.txt"}')
    ]
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [c.model_dump(exclude_none=True) for c in calls],
        }
    )
    messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": "hello"})
    text, _ = ask()
    assert text == ANSWER_PREFIX + "hello"
    assert fake.refused() == [True, False, False]  # refused once, then right at once


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("mode", ["stream", "generate"])
def test_the_ai_sdk_runs_its_agent_loop_on_an_upstream_refusing_its_schema(
    served: tuple[RefusingUpstream, str], mode: str
) -> None:
    fake, base_url = served
    result = run_vercel_agent(
        "v2",
        base_url,
        "m",
        [{"name": "read", "description": "read a file", "parameters": READ}],
        execute={"read": {"text": "hello"}},
        max_steps=3,
        prompt="read a.txt",
        mode=mode,
    )
    assert result["errors"] == [], result["apiErrors"]
    assert result["executed"] == [{"toolName": "read", "input": ARGUMENTS}]
    assert result["text"].startswith(ANSWER_PREFIX) and "hello" in result["text"]
    assert fake.refused() == [True, False, False]
