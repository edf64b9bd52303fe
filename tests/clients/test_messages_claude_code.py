"""Claude Code 2.1.332, headless and offline, through the Messages front against fake chat
upstreams that enforce their receipt rules: it runs a real `Bash` tool (`echo`) and answers,
then a second user turn (`--continue`) sends the whole history back, thinking blocks and
tool_use/tool_result pairs as it kept them. The upstream accepting every request is the judge
(Claude Code recovers from some refusals on its own, shared/MESSAGES.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.clients.messages_node import claude_environment, ensure_installed, run_claude
from tests.support.gemini_upstream import TextStep, running_gemini_upstream, tool_step
from tests.support.proxies import running_proxy
from tests.support.reasoning_upstreams import (
    running_deepseek_upstream,
    running_openrouter_upstream,
)

MARKERS = ("streamfix-one", "streamfix-two")
SCRIPT_TURN = [
    [
        tool_step(("Bash", {"command": f"echo {marker}", "description": "echo"})),
        TextStep(f"Done {marker}."),
    ]
    for marker in MARKERS
]


@contextmanager
def upstream(kind: str) -> Iterator[tuple[Any, str, str]]:
    if kind == "gemini":
        # The Gemini fake scripts by step within the current turn: the same two steps each turn.
        script = [
            tool_step(("Bash", {"command": "echo streamfix-one", "description": "echo"})),
            TextStep("Done."),
        ]
        with (
            running_gemini_upstream(script) as (fake, root),
            running_proxy(f"{root}/v1beta/openai", **{"upstream.profile": "gemini"}) as proxy,
        ):
            yield fake, proxy, "gemini-3-flash-preview"
    elif kind == "openrouter":
        with (
            running_openrouter_upstream(script=SCRIPT_TURN) as (fake, root),
            running_proxy(f"{root}/api/v1", **{"upstream.profile": "openrouter"}) as proxy,
        ):
            yield fake, proxy, "google/gemini-3-pro-preview"
    else:
        with (
            running_deepseek_upstream(script=SCRIPT_TURN) as (fake, root),
            running_proxy(f"{root}/v1", **{"upstream.profile": "deepseek"}) as proxy,
        ):
            yield fake, proxy, "deepseek-v4-flash"


def claude(proxy: str, model: str, home: Path, prompt: str, *more: str) -> list[dict[str, Any]]:
    environment = claude_environment(proxy, home)
    environment["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    return run_claude(model, home, environment, prompt, *more)


def tool_results(lines: list[dict[str, Any]]) -> list[str]:
    out = []
    for line in lines:
        if line.get("type") == "user":
            for block in line["message"]["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    content = block.get("content")
                    out.append(content if isinstance(content, str) else json.dumps(content))
    return out


@pytest.mark.parametrize("kind", ["gemini", "deepseek", "openrouter"])
def test_claude_code_runs_bash_over_two_turns(kind: str, tmp_path: Path) -> None:
    ensure_installed()
    with upstream(kind) as (fake, proxy, model):
        first = claude(proxy, model, tmp_path, "Run echo with the Bash tool.")
        assert any("streamfix-one" in result for result in tool_results(first)), first
        assert not any(
            line.get("is_api_error_message") for line in first if line.get("type") == "assistant"
        )
        assert first[-1]["type"] == "result" and first[-1]["subtype"] == "success", first[-1]
        second = claude(proxy, model, tmp_path, "Run it once more.", "--continue")
        assert tool_results(second), second
        assert second[-1]["type"] == "result" and second[-1]["subtype"] == "success", second[-1]
        if kind == "gemini":
            assert fake.rejections == 0
        else:
            assert fake.rejections == []
        # Every request went to the chat endpoint with the key as a bearer token.
        assert len(fake.requests) >= 4
        assert all(r.headers.get("authorization") == "Bearer dummy-key" for r in fake.requests)
