"""Codex CLI's two tool shapes beyond `function`, through the Responses front in front of chat
upstreams that behave like Gemini, DeepSeek and OpenRouter, over two turns each:

- its freeform `apply_patch` (a `custom` tool whose input is a raw patch, offered when the
  model's catalog entry says so: codex.model_catalog). The proxy offers it upstream as a
  function of one string argument; the upstream's call comes back to Codex as a
  `custom_tool_call` carrying the bare patch, Codex applies it to the workspace, and its
  `custom_tool_call_output` goes up as a tool message the upstream accepts;
- an MCP server's tool, which Codex offers as a `namespace` tool (`mcp__notes` holding
  `remember`): flattened upstream, restored on the call Codex gets, so Codex calls the real
  MCP server (notes_mcp_server.py), and the output goes up the same way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.fronts.responses.codex import completed_items, model_catalog, rollout_items, run_codex
from tests.support.gemini_upstream import Step, TextStep, tool_step
from tests.support.reasoning_flows import PROVIDERS, behind_proxy
from tests.support.signature_flows import MODEL, gemini_behind_proxy

NOTE_FILE = "streamfix-note.txt"
PATCH = f"*** Begin Patch\n*** Add File: {NOTE_FILE}\n+patched through streamfix\n*** End Patch\n"
PATCH_ANSWER = "The note file is added."
NOTE = "streamfix-42"
MCP_ANSWER = "The note is stored."
MCP_SERVER = Path(__file__).with_name("notes_mcp_server.py")
# Codex starts a server marked required before its first request (an optional one gets a
# short grace period and may miss it), and fails the run if the server cannot start.
MCP_CONFIG = (
    f'mcp_servers.notes={{command="{sys.executable}",args=["{MCP_SERVER}"],'
    "required=true,startup_timeout_sec=60}"
)
VENDORS = ["gemini", *PROVIDERS]


@contextmanager
def upstream(vendor: str, script: list[Step]) -> Iterator[tuple[Any, str, str]]:
    """(fake, the proxy's base URL, the model) for a vendor-like fake with this two-step turn."""
    if vendor == "gemini":
        with gemini_behind_proxy(list(script)) as (fake, _, proxy):
            yield fake, proxy, MODEL
    else:
        provider = PROVIDERS[vendor]
        with behind_proxy(provider, script=[list(script)]) as (fake, _, proxy):
            yield fake, proxy, provider.model


def accepted(fake: Any, vendor: str) -> None:
    assert fake.rejections == (0 if vendor == "gemini" else []), fake.rejections


def offered(request: Any, name: str) -> dict[str, Any]:
    """The chat tool `name` as the upstream was offered it."""
    tools = {t["function"]["name"]: t["function"] for t in request.json.get("tools") or ()}
    assert name in tools, sorted(tools)
    return tools[name]


def follow_up(fake: Any, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """In the last request: the assistant's call to `name` and the tool message answering it."""
    messages = fake.requests[-1].json["messages"]
    calls = [
        call
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or ()
        if call["function"]["name"] == name
    ]
    assert len(calls) == 1, json.dumps(messages)[-3000:]
    answers = [m for m in messages if m.get("tool_call_id") == calls[0]["id"]]
    assert len(answers) == 1 and answers[0]["role"] == "tool", json.dumps(messages)[-3000:]
    return calls[0], answers[0]


def last_message(events: list[dict[str, Any]]) -> str:
    return str([m["text"] for m in completed_items(events, "agent_message")][-1])


@pytest.mark.parametrize("vendor", VENDORS)
def test_codex_applies_a_freeform_patch(vendor: str, tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    script: list[Step] = [tool_step(("apply_patch", {"input": PATCH})), TextStep(PATCH_ANSWER)]
    with upstream(vendor, script) as (fake, proxy, model):
        catalog = model_catalog(tmp_path, model)
        events = run_codex(
            proxy, model, "add the note file", work=work, home=home, config=(catalog,)
        )
        accepted(fake, vendor)
        assert len(fake.requests) == 2
        # Codex offered apply_patch as a custom tool: upstream it is one string argument, its
        # grammar told in the description.
        tool = offered(fake.requests[0], "apply_patch")
        assert tool["parameters"]["required"] == ["input"]
        assert "lark grammar" in tool["description"]
        # Codex got a custom_tool_call whose input is the bare patch (not the JSON wrapping it),
        # answered it with a custom_tool_call_output, and applied the patch to its workspace...
        kept = {item["type"]: item for item in rollout_items(home)}
        assert kept["custom_tool_call"]["name"] == "apply_patch"
        assert kept["custom_tool_call"]["input"] == PATCH
        assert kept["custom_tool_call_output"]["call_id"] == kept["custom_tool_call"]["call_id"]
        assert "function_call" not in kept
        assert (work / NOTE_FILE).read_text() == "patched through streamfix\n"
        changes = completed_items(events, "file_change")
        assert changes and changes[0]["status"] == "completed", events
        # ... and its custom_tool_call / custom_tool_call_output came back as a call with the
        # same one-argument input and a tool message.
        call, answer = follow_up(fake, "apply_patch")
        assert json.loads(call["function"]["arguments"]) == {"input": PATCH}
        assert NOTE_FILE in answer["content"], answer
        assert last_message(events) == PATCH_ANSWER


@pytest.mark.parametrize("vendor", VENDORS)
def test_codex_calls_a_namespaced_mcp_tool(vendor: str, tmp_path: Path) -> None:
    flat = "mcp__notes__remember"
    script: list[Step] = [tool_step((flat, {"text": NOTE})), TextStep(MCP_ANSWER)]
    with upstream(vendor, script) as (fake, proxy, model):
        events = run_codex(proxy, model, "store the note", home=tmp_path, config=(MCP_CONFIG,))
        accepted(fake, vendor)
        assert len(fake.requests) == 2
        assert offered(fake.requests[0], flat)["parameters"]["required"] == ["text"]
        # Codex got the call back under its namespace and ran it on the MCP server.
        kept = {item["type"]: item for item in rollout_items(tmp_path)}
        call_item = kept["function_call"]
        assert (call_item["namespace"], call_item["name"]) == ("mcp__notes", "remember")
        assert kept["function_call_output"]["call_id"] == call_item["call_id"]
        mcp_calls = completed_items(events, "mcp_tool_call")
        assert mcp_calls, events
        assert (mcp_calls[0]["server"], mcp_calls[0]["tool"]) == ("notes", "remember")
        assert mcp_calls[0]["status"] == "completed", mcp_calls[0]
        call, answer = follow_up(fake, flat)
        assert json.loads(call["function"]["arguments"]) == {"text": NOTE}
        assert f"noted: {NOTE}" in answer["content"], answer
        assert last_message(events) == MCP_ANSWER
