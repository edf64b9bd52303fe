"""Anthropic's own tool types in a Messages request's `tools`, by what runs them, and the
refusal each gets in front of a chat upstream (Anthropic's tool reference, and the `type`s of
anthropic-python's `BetaToolUnionParam`).

A server tool runs on Anthropic's servers: no chat upstream, and not the client, can run it.
An Anthropic-defined client tool (bash, text editor, computer use, memory, the toolsets) is
run by the client, but its input schema is built into Anthropic's models and never sent: a
chat model would be offered a tool it cannot call. Both are refused with a 400 naming the
tool and what to do instead. Matched by prefix: each dated version (`web_search_20250305`,
`web_search_20260209`, ...) is the same tool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.fronts.quoted import quoted


@dataclass(frozen=True, slots=True)
class AnthropicTool:
    prefix: str
    """The `type` of every version of it begins so (or is so, for an undated one)."""
    what: str
    instead: str
    """What the client can do instead, said in the refusal."""
    on_server: bool = True


SEARCH_INSTEAD = (
    "give the client a tool of its own that does it (an MCP server, or a custom tool with an "
    "input_schema); in Claude Code, deny the tool that asks for it "
    '(`"permissions": {"deny": ["WebSearch"]}`)'
)
DECLARE_INSTEAD = (
    "declare it as a custom tool with a name, a description and an input_schema, which any "
    "model can call"
)

ANTHROPIC_TOOLS: tuple[AnthropicTool, ...] = (
    AnthropicTool("web_search_", "Anthropic's web search", SEARCH_INSTEAD),
    AnthropicTool(
        "web_fetch_",
        "Anthropic's web fetch",
        "give the client a fetch tool of its own (Claude Code's WebFetch runs on the client)",
    ),
    AnthropicTool(
        "code_execution_",
        "Anthropic's code execution sandbox",
        "give the client a tool that runs code where it runs (a shell tool of its own)",
    ),
    AnthropicTool(
        "advisor_", "Anthropic's advisor (another Claude model consulted)", "leave it out"
    ),
    AnthropicTool(
        "tool_search_tool_",
        "Anthropic's tool search",
        "send the tools themselves, without `defer_loading`",
    ),
    AnthropicTool(
        "mcp_toolset",
        "Anthropic's MCP connector",
        "connect the MCP server to the client (Claude Code: `claude mcp add`), whose tools "
        "then go up as custom tools",
    ),
    AnthropicTool("bash_", "Anthropic's bash tool", DECLARE_INSTEAD, on_server=False),
    AnthropicTool("text_editor_", "Anthropic's text editor tool", DECLARE_INSTEAD, on_server=False),
    AnthropicTool("computer_", "Anthropic's computer use tool", DECLARE_INSTEAD, on_server=False),
    AnthropicTool("memory_", "Anthropic's memory tool", DECLARE_INSTEAD, on_server=False),
    AnthropicTool(
        "browser_toolset_", "Anthropic's browser toolset", DECLARE_INSTEAD, on_server=False
    ),
)


def anthropic_tool(kind: str) -> AnthropicTool | None:
    return next((tool for tool in ANTHROPIC_TOOLS if kind.startswith(tool.prefix)), None)


def refusal(tool: dict[str, Any], where: str) -> str:
    """Why a tool whose `type` is not a custom tool's cannot go to a chat upstream, and what
    to do instead."""
    kind = tool.get("type")
    name = tool.get("name")
    called = f" ({quoted(name)})" if isinstance(name, str) else ""
    known = anthropic_tool(kind) if isinstance(kind, str) else None
    if known is None:
        return (
            f"{where}.type: {quoted(kind)}{called} is not a tool type this proxy knows; "
            "declare the tool as a custom tool with a name and an input_schema"
        )
    if known.on_server:
        why = (
            "a server tool: it runs on Anthropic's servers, and the chat upstream behind "
            "this proxy cannot run it"
        )
    else:
        why = (
            "an Anthropic-defined client tool: its input schema is built into Anthropic's "
            "models and never sent, so the chat model behind this proxy cannot call it"
        )
    return f"{where}.type: {quoted(kind)}{called} is {known.what}, {why}. Instead, {known.instead}."
