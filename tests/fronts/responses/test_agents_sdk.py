"""The OpenAI Agents SDK (`Runner.run_streamed` with function tools, its Responses model)
through the proxy's Responses front, in front of the DeepSeek and OpenRouter fakes: two
questions, five tool steps, the second question sent with the whole history
(`to_input_list()`) or continued by `previous_response_id`. The fakes reject a follow-up that
lacks the reasoning they issued, so the scripted answers coming back prove the receipts
travelled. Tracing is off: the SDK would otherwise export spans to OpenAI."""

from __future__ import annotations

import asyncio
from typing import Any

import agents  # openai-agents, in the test extra: a missing install fails, never skips
import pytest
from openai import AsyncOpenAI

from tests.support.reasoning_flows import (
    FINAL_TEXTS,
    PROVIDERS,
    QUESTIONS,
    Provider,
    behind_proxy,
)

agents.set_tracing_disabled(True)


@agents.function_tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"the contents of {path}"


@agents.function_tool
def list_dir(path: str) -> str:
    """List a directory."""
    return "a.txt b.txt"


async def two_questions(base_url: str, model: str, mode: str) -> list[str]:
    client = AsyncOpenAI(base_url=base_url, api_key="sk-agents", max_retries=0)
    agent = agents.Agent(
        name="files",
        instructions="Answer with the tools.",
        tools=[read_file, list_dir],
        model=agents.OpenAIResponsesModel(model=model, openai_client=client),
    )
    finals: list[str] = []
    history: list[Any] = []
    previous: str | None = None
    for question in QUESTIONS:
        if mode == "history":
            run = agents.Runner.run_streamed(
                agent, [*history, {"role": "user", "content": question}]
            )
        else:
            run = agents.Runner.run_streamed(agent, question, previous_response_id=previous)
        async for _ in run.stream_events():
            pass
        finals.append(str(run.final_output))
        history = run.to_input_list()
        previous = run.last_response_id
    return finals


@pytest.mark.parametrize("mode", ["history", "previous"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_agents_sdk_runs_its_tools_over_two_questions(provider: Provider, mode: str) -> None:
    with behind_proxy(provider) as (fake, _, proxy):
        assert asyncio.run(two_questions(proxy, provider.model, mode)) == FINAL_TEXTS
        assert fake.rejections == []
        assert len(fake.requests) == 5
