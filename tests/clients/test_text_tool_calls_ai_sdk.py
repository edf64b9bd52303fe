"""Tool-call markup written as text, through the proxy, run by the real Vercel AI SDK.

`@ai-sdk/openai-compatible` v1 / v2 / v3 with their `ai` majors (tests/clients/vercel.py, the
same packages and install as the real-client matrix), `streamText` and `generateText`, with a
`get_weather` tool that has an `execute` and `stopWhen: stepCountIs(3)`: the SDK itself runs
the tool when the first step ends in a tool call and sends the second request. The upstream is
tests/support/markup_upstream.py (a vLLM / llama.cpp server whose tool parser missed: Hermes,
Qwen3-Coder, Kimi K2, GLM, DeepSeek V3.1, Mistral or MiniMax-M2 markup as `content`, finish
"stop"), which answers the second request only when its history is one a chat template
renders, with text that uses the tool's result.

Through the proxy the tool's execute must be called once with the arguments the model wrote
(the bare-text values of Qwen3-Coder, GLM and MiniMax-M2 converted by the schema), the first
step must end "tool-calls" with no markup in its text, and the final text must arrive.
Without the proxy the SDK gets the markup as text, runs nothing and stops after one step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.clients.vercel import SDK_VERSIONS, run_vercel_agent
from tests.support.markup_upstream import (
    FAMILIES,
    PARIS,
    PREFIX,
    TOKYO,
    TOOL_SCHEMAS,
    MarkupUpstream,
    answer_for,
    final_answer,
    running_markup_upstream,
    tool_results,
)
from tests.support.proxies import running_proxy

SDKS = sorted(SDK_VERSIONS)
MODES = ("stream", "generate")
PROMPT = "What is the weather in Paris for the next three days?"
RESULT = {"forecast": ["sun", "sun", "cloud"]}
"""What the tool's execute returns."""
GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")

TABLE = (
    "text tool calls through the proxy, Vercel AI SDK (tool with execute, stopWhen): "
    + ", ".join(f"{sdk} = @ai-sdk/openai-compatible {v}" for sdk, v in SDK_VERSIONS.items())
)


def vercel_tools(*names: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "description": f"the {name} tool", "parameters": TOOL_SCHEMAS[name]}
        for name in names
    ]


WEATHER = vercel_tools("get_weather")


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[MarkupUpstream, str]]:
    with running_markup_upstream() as pair:
        yield pair


@pytest.fixture
def fake(served: tuple[MarkupUpstream, str]) -> MarkupUpstream:
    served[0].clear()
    return served[0]


@pytest.fixture(scope="module")
def proxy(served: tuple[MarkupUpstream, str]) -> Iterator[str]:
    with running_proxy(served[1]) as root:
        yield f"{root}/v1"


def run(
    base_url: str, model: str, mode: str, sdk: str, tools: list[dict[str, Any]] = WEATHER
) -> dict[str, Any]:
    return run_vercel_agent(
        sdk,
        base_url,
        model,
        tools,
        execute={"get_weather": RESULT},
        max_steps=3,
        prompt=PROMPT,
        mode=mode,
    )


def steps(result: dict[str, Any]) -> list[tuple[list[str], str | None]]:
    return [([c["toolName"] for c in s["toolCalls"]], s["finishReason"]) for s in result["steps"]]


def assert_ids(model: str, result: dict[str, Any]) -> None:
    ids = [c["toolCallId"] for c in result["steps"][0]["toolCalls"]]
    assert len(set(ids)) == len(ids), ids
    answer = answer_for(model)
    for position, call_id in enumerate(ids):
        wrote = answer.call_id(position)
        rule = answer.family.id_rule or GENERATED_ID
        assert call_id == wrote if wrote is not None else rule.fullmatch(call_id), ids


def assert_second_request(fake: MarkupUpstream, result: dict[str, Any]) -> None:
    """Two requests, the second accepted, and the final text is the fake's answer to it."""
    assert fake.rejections == []
    assert len(fake.chat_requests) == 2
    sent = fake.chat_requests[-1]["messages"]
    results = tool_results(sent)
    assert [json.loads(r) for r in results] == [RESULT] * len(results)
    assert result["steps"][-1]["text"] == final_answer(results)


def _case(family: str, mode: str, sdk: str) -> Any:
    marks = [pytest.mark.client_matrix(table=TABLE, row=family, column=f"{mode} {sdk}")]
    return pytest.param(family, mode, sdk, id=f"{family}-{mode}-{sdk}", marks=marks)


def assert_agent_run(fake: MarkupUpstream, base_url: str, model: str, mode: str, sdk: str) -> None:
    """The SDK ran the tool once with the arguments written, and got the final text."""
    result = run(base_url, model, mode, sdk)
    assert result["errors"] == [], result["apiErrors"]
    assert result["executed"] == [{"toolName": "get_weather", "input": PARIS}]
    assert steps(result) == [(["get_weather"], "tool-calls"), ([], "stop")]
    assert result["steps"][0]["text"] == ""  # no markup left as text
    assert_ids(model, result)
    assert result["steps"][0]["toolResults"] == [
        {
            "toolCallId": result["steps"][0]["toolCalls"][0]["toolCallId"],
            "toolName": "get_weather",
            "output": RESULT,
        }
    ]
    assert_second_request(fake, result)
    assert result["text"] == result["steps"][-1]["text"]
    assert result["finishReason"] == "stop"


CASES = [_case(family, mode, sdk) for family in FAMILIES for mode in MODES for sdk in SDKS]


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize(("family", "mode", "sdk"), CASES)
def test_the_sdk_runs_the_tool_and_gets_the_final_text(
    fake: MarkupUpstream, proxy: str, family: str, mode: str, sdk: str
) -> None:
    assert_agent_run(fake, proxy, family, mode, sdk)


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_control_a_working_parser_passes_the_same_checks(family: str, mode: str) -> None:
    # The same server with its tool parser working, no proxy: what the checks above accept.
    with running_markup_upstream(parser=True) as (control, url):
        assert_agent_run(control, url, family, mode, "v2")


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("sdk", SDKS)
@pytest.mark.parametrize("family", FAMILIES)
def test_parallel_calls_are_both_executed(
    fake: MarkupUpstream, proxy: str, family: str, sdk: str
) -> None:
    model = f"{family}/parallel"
    result = run(proxy, model, "stream", sdk)
    assert result["errors"] == [], result["apiErrors"]
    assert [c["input"] for c in result["steps"][0]["toolCalls"]] == [PARIS, TOKYO]
    executed = sorted(result["executed"], key=lambda e: e["input"]["city"])
    assert executed == [{"toolName": "get_weather", "input": a} for a in (PARIS, TOKYO)]
    assert steps(result) == [(["get_weather", "get_weather"], "tool-calls"), ([], "stop")]
    assert_ids(model, result)
    assert_second_request(fake, result)


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_text_before_the_call_stays_text(
    fake: MarkupUpstream, proxy: str, family: str, mode: str
) -> None:
    result = run(proxy, f"{family}/prefixed", mode, "v2")
    assert result["errors"] == [], result["apiErrors"]
    assert result["executed"] == [{"toolName": "get_weather", "input": PARIS}]
    assert result["steps"][0]["text"].rstrip() == PREFIX.rstrip()
    for marker in FAMILIES[family].markers:
        assert marker not in result["text"]
    assert_second_request(fake, result)


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("family", FAMILIES)
def test_an_undeclared_tool_stays_text(fake: MarkupUpstream, proxy: str, family: str) -> None:
    result = run(proxy, family, "stream", "v2", tools=vercel_tools("get_time"))
    assert result["errors"] == []
    assert result["executed"] == []
    assert steps(result) == [([], "stop")]
    assert result["text"] == answer_for(family).text


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_without_proxy_the_sdk_runs_nothing(
    fake: MarkupUpstream, served: tuple[MarkupUpstream, str], family: str, mode: str
) -> None:
    result = run(served[1], family, mode, "v2")
    assert result["errors"] == []
    assert result["executed"] == []
    assert steps(result) == [([], "stop")]
    assert result["text"] == answer_for(family).text
    assert len(fake.requests) == 1
