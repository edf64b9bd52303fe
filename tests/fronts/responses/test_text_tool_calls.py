"""Tool calls a model wrote as text (tests/support/markup_upstream.py: a vLLM / llama.cpp server
whose tool parser missed; Hermes, Qwen3-Coder, Kimi K2, GLM, DeepSeek, Mistral, MiniMax markup
arriving as `content`) reach a Responses client as `function_call` items: the chat core's
text-tool-call repair runs before the translation. The client runs the tools and sends the
results back with the whole history; the fake accepts the follow-up only if the history is one
a chat template can render, and answers with the results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fronts.responses.responses_flows import client, one_response
from tests.support.markup_upstream import (
    FAMILIES,
    TOOL_SCHEMAS,
    MarkupUpstream,
    answer_for,
    final_answer,
    running_markup_upstream,
)
from tests.support.proxies import running_proxy

WEATHER = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "the get_weather tool",
        "parameters": TOOL_SCHEMAS["get_weather"],
    }
]
QUESTION = {"role": "user", "content": "What is the weather in Paris for the next three days?"}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[MarkupUpstream, str]]:
    with running_markup_upstream() as (fake, url), running_proxy(url) as proxy:
        yield fake, f"{proxy}/v1"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "create"])
@pytest.mark.parametrize("variant", ["", "/parallel"], ids=["one", "parallel"])
@pytest.mark.parametrize("family", FAMILIES)
def test_markup_becomes_function_calls_and_the_follow_up_answers(
    stack: tuple[MarkupUpstream, str], family: str, variant: str, stream: bool
) -> None:
    fake, proxy = stack
    fake.clear()
    model = family + variant
    sdk = client(proxy)
    first = one_response(sdk, stream, model=model, input=[QUESTION], tools=WEATHER, store=False)
    calls = [item for item in first["output"] if item["type"] == "function_call"]
    expected = answer_for(model).calls
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == expected
    assert not any(item["type"] == "message" for item in first["output"])
    results = [f"{c['name']} said sunny ({position})" for position, c in enumerate(calls)]
    outputs: list[dict[str, Any]] = [
        {"type": "function_call_output", "call_id": c["call_id"], "output": result}
        for c, result in zip(calls, results, strict=True)
    ]
    second = one_response(
        sdk,
        stream,
        model=model,
        input=[QUESTION, *first["output"], *outputs],
        tools=WEATHER,
        store=False,
    )
    assert fake.rejections == []
    text = "".join(
        p["text"] for i in second["output"] if i["type"] == "message" for p in i["content"]
    )
    assert text == final_answer(results)
