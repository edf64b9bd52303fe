"""Every recorded upstream behaviour (tests/transcripts: Gemini's indexless calls and `stop`
after calls, vLLM's leaked argument tails and nameless calls, Kimi's per-round ids, Mistral's
indexless parallel calls, GLM, MiniMax, OpenRouter...) through the Responses front, streamed
and not: the repaired turn arrives as valid Responses events (every client invariant) whose
calls and text are the ones the transcript expects of the chat repairs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fronts.responses.responses_flows import client, one_response
from tests.support.fake_upstream import load_transcript, running_fake_upstream, transcript_names
from tests.support.proxies import running_proxy

# n=2 has no Responses counterpart (one output per response); the front answers choice 0.
NAMES = [name for name in transcript_names() if "n2_choices" not in name]
# Streamed for every transcript; non-streamed for those that recorded a whole answer too.
CASES = [pytest.param(name, True, id=f"{name}-stream") for name in NAMES] + [
    pytest.param(name, False, id=f"{name}-create")
    for name in NAMES
    if load_transcript(name).response is not None
]


@pytest.fixture(scope="module")
def proxy() -> Iterator[str]:
    with running_fake_upstream() as (_, upstream), running_proxy(f"{upstream}/v1") as root:
        yield f"{root}/v1"


def responses_tools(request: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tools = request.get("tools") or []
    if tools:
        out["tools"] = [
            {
                "type": "function",
                "name": t["function"]["name"],
                "parameters": t["function"].get("parameters") or {"type": "object"},
            }
            for t in tools
        ]
    choice = request.get("tool_choice")
    if isinstance(choice, dict):
        out["tool_choice"] = {"type": "function", "name": choice["function"]["name"]}
    elif choice is not None:
        out["tool_choice"] = choice
    return out


@pytest.mark.parametrize(("name", "stream"), CASES)
def test_each_transcript_becomes_a_valid_response(proxy: str, name: str, stream: bool) -> None:
    transcript = load_transcript(name)
    request = responses_tools(transcript.meta["request"])
    response = one_response(client(proxy), stream, model=name, input="go", **request)
    expected = (transcript.meta.get("expect") or {}).get("choices", [{}])[0]
    calls = [item for item in response["output"] if item["type"] == "function_call"]
    if "tool_calls" in expected:
        assert [(c["name"], json.loads(c["arguments"] or "{}")) for c in calls] == [
            (c["name"], c["arguments"]) for c in expected["tool_calls"]
        ]
        assert len({c["call_id"] for c in calls}) == len(calls)
    if expected.get("content"):
        text = "".join(
            p["text"] for i in response["output"] if i["type"] == "message" for p in i["content"]
        )
        assert text == expected["content"]
