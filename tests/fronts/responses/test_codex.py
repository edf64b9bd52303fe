"""Codex CLI through the proxy's Responses front, offline, in front of chat upstreams that
behave like Gemini (indexless calls, `stop` after calls, the signature required back on the
follow-up), DeepSeek (`reasoning_content` required back) and OpenRouter (`reasoning_details`):
the model asks for a real shell command, Codex runs it, sends the output back with the whole
history (`store: false`), and the upstream accepts the follow-up and answers. Two turns each;
the command's output reaching the upstream proves Codex executed it."""

from __future__ import annotations

import pytest

from tests.fronts.responses.codex import completed_items, run_codex
from tests.support.gemini_upstream import TextStep, tool_step
from tests.support.reasoning_flows import PROVIDERS, Provider, behind_proxy
from tests.support.signature_flows import MODEL, gemini_behind_proxy

COMMAND = "echo streamfix-$((6*7))"
ANSWER = "The command printed streamfix-42."
SCRIPT = [tool_step(("exec_command", {"cmd": COMMAND})), TextStep(ANSWER)]


def tool_outputs(fake: object) -> list[str]:
    return [
        str(message.get("content"))
        for request in fake.requests  # type: ignore[attr-defined]
        for message in request.json["messages"]
        if message.get("role") == "tool"
    ]


def assert_two_turns(events: list[dict[str, object]], fake: object) -> None:
    commands = completed_items(events, "command_execution")
    assert commands and "streamfix-42" in str(commands[0].get("aggregated_output")), events
    assert [m["text"] for m in completed_items(events, "agent_message")][-1] == ANSWER
    assert any("streamfix-42" in output for output in tool_outputs(fake))
    assert [e["type"] for e in events if e["type"].startswith("turn.")][-1] == "turn.completed"


def test_codex_runs_a_shell_command_on_gemini() -> None:
    with gemini_behind_proxy(list(SCRIPT)) as (fake, _, proxy):
        events = run_codex(proxy, MODEL, "run the echo command")
        assert_two_turns(events, fake)
        assert len(fake.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_codex_runs_a_shell_command_on_reasoning_upstreams(provider: Provider) -> None:
    with behind_proxy(provider, script=[list(SCRIPT)]) as (fake, _, proxy):
        events = run_codex(proxy, provider.model, "run the echo command")
        assert fake.rejections == []
        assert_two_turns(events, fake)
        assert len(fake.requests) == 2
