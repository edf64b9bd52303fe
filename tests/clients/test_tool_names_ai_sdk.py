"""Tool names the upstream refuses, through the proxy, run by the real Vercel AI SDK.

`@ai-sdk/openai-compatible` v1 / v2 / v3 with their `ai` majors (tests/clients/vercel.py, the
same packages and install as the real-client matrix), `streamText` and `generateText`, a tool
named as MCP clients name them (`mcp/server/read` for Gemini, `files.read` for an upstream
with OpenAI's rule) that has an `execute`, and `stopWhen: stepCountIs(3)`: the SDK itself runs
the tool when the first step ends in its call and sends the second request. The upstream is
tests/support/tool_name_upstream.py, which refuses such a name with its own 400 and calls the
tool by the name it was sent.

Through the proxy the SDK must find the tool it declared (a call under any other name is the
SDK's NoSuchToolError), run it once, and get the final text; the upstream must have been sent,
in both requests, only names it accepts. Straight to the upstream, the first request fails
with the upstream's 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.clients.vercel import SDK_VERSIONS, run_vercel_agent
from tests.support.proxies import running_proxy
from tests.support.tool_name_upstream import (
    ANSWER_PREFIX,
    ARGUMENTS,
    ToolNameUpstream,
    declared_names,
    history_names,
    running_tool_name_upstream,
)

SDKS = sorted(SDK_VERSIONS)
MODES = ("stream", "generate")
READ = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
RESULT = {"text": "hello"}
"""What the tool's execute returns."""
NAME = {"gemini": "mcp/server/read", "openai": "files.read"}
ROUTES = {
    "gemini": {"upstream.profile": "gemini"},
    "openai": {"upstream.tool_names": "openai"},
}
TABLE = (
    "tool names the upstream refuses, through the proxy, Vercel AI SDK (execute, stopWhen): "
    + ", ".join(f"{sdk} = @ai-sdk/openai-compatible {v}" for sdk, v in SDK_VERSIONS.items())
)


def vercel_tools(name: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "description": "read a file", "parameters": READ},
        {"name": "list_dir", "description": "list a directory", "parameters": READ},
    ]


@pytest.fixture(scope="module", params=["gemini", "openai"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[ToolNameUpstream, str, str]]:
    rule = request.param
    with (
        running_tool_name_upstream(rule) as (fake, url),
        running_proxy(url, **ROUTES[rule]) as root,
    ):
        yield fake, url, f"{root}/v1"


@pytest.fixture
def fake(served: tuple[ToolNameUpstream, str, str]) -> ToolNameUpstream:
    served[0].clear()
    return served[0]


def run(base_url: str, name: str, sdk: str, mode: str) -> dict[str, Any]:
    return run_vercel_agent(
        sdk,
        base_url,
        "m",
        vercel_tools(name),
        execute={name: RESULT},
        max_steps=3,
        prompt="read a.txt",
        mode=mode,
    )


def _case(mode: str, sdk: str) -> Any:
    marks = [pytest.mark.client_matrix(table=TABLE, row="renamed tool", column=f"{mode} {sdk}")]
    return pytest.param(mode, sdk, id=f"{mode}-{sdk}", marks=marks)


@pytest.mark.usefixtures("node_clients")
@pytest.mark.parametrize(("mode", "sdk"), [_case(mode, sdk) for mode in MODES for sdk in SDKS])
def test_the_sdk_runs_the_tool_it_declared_and_gets_the_final_text(
    served: tuple[ToolNameUpstream, str, str], fake: ToolNameUpstream, mode: str, sdk: str
) -> None:
    name = NAME[fake.rule]
    assert not fake.accepts(name)
    result = run(served[2], name, sdk, mode)
    assert result["errors"] == [], result["apiErrors"]
    assert result["executed"] == [{"toolName": name, "input": ARGUMENTS}]
    steps = [([c["toolName"] for c in s["toolCalls"]], s["finishReason"]) for s in result["steps"]]
    assert steps == [([name], "tool-calls"), ([], "stop")]
    assert result["text"].startswith(ANSWER_PREFIX) and "hello" in result["text"]

    assert fake.rejections == []
    first, second = fake.chat_requests
    sent = declared_names(first)
    assert all(fake.accepts(n) for n in sent + declared_names(second) + history_names(second))
    assert name not in sent and "list_dir" in sent
    assert declared_names(second) == sent
    assert history_names(second) == [n for n in sent if n != "list_dir"]


@pytest.mark.usefixtures("node_clients")
def test_control_straight_to_the_upstream_the_name_is_refused(
    served: tuple[ToolNameUpstream, str, str], fake: ToolNameUpstream
) -> None:
    result = run(served[1], NAME[fake.rule], "v2", "stream")
    assert [e["status"] for e in result["apiErrors"]] == [400]
    assert result["executed"] == []
    assert len(fake.rejections) == 1
