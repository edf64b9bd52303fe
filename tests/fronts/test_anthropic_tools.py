"""Anthropic's own tool types in a Messages request (proxy/fronts/messages/anthropic_tools.py):
every `type` anthropic-python knows today is in the table, and each is refused with a 400 that
names the tool, says why (a server tool runs on Anthropic's servers; an Anthropic-defined
client tool carries no schema) and what to do instead; through the proxy too, with nothing
sent upstream."""

from __future__ import annotations

import typing
from typing import Any, get_args, get_origin, get_type_hints

import anthropic
import pytest
from anthropic.types.beta.beta_tool_union_param import BetaToolUnionParam

from proxy.fronts.messages.anthropic_tools import ANTHROPIC_TOOLS, anthropic_tool
from proxy.fronts.messages.request import MessagesError, translate
from tests.support.proxies import running_proxy
from tests.support.scripted_chat_upstream import running_scripted_upstream

SERVER = ("web_search_", "web_fetch_", "code_execution_", "advisor_", "tool_search_tool_")
"""Anthropic's tool reference: these run on Anthropic's servers (with `mcp_toolset`)."""


def _literals(annotation: Any) -> list[str]:
    """The strings of a `Literal[...]`, through `Required[...]` / `Optional[...]`."""
    if get_origin(annotation) is typing.Literal:
        return [value for value in get_args(annotation) if isinstance(value, str)]
    return [value for arg in get_args(annotation) for value in _literals(arg)]


def sdk_tool_types() -> list[str]:
    """Every tool `type` of anthropic-python's beta tool union, but the custom tool's."""
    types = {
        kind
        for param in get_args(BetaToolUnionParam)
        for kind in _literals(get_type_hints(param, include_extras=True)["type"])
    }
    return sorted(types - {"custom"})


TYPES = sdk_tool_types()


def refused(tool: dict[str, Any]) -> MessagesError:
    body = {"model": "m", "max_tokens": 8, "messages": [], "tools": [tool]}
    with pytest.raises(MessagesError) as caught:
        translate(body)
    return caught.value


def test_the_sdk_knows_the_tools_of_the_tool_reference() -> None:
    # The list below is read from the SDK: it must hold what Anthropic documents today.
    for kind in ("web_search_20250305", "web_fetch_20250910", "code_execution_20250825"):
        assert kind in TYPES
    for kind in ("bash_20250124", "text_editor_20250728", "computer_20250124", "mcp_toolset"):
        assert kind in TYPES


def test_every_tool_type_of_today_is_in_the_table() -> None:
    assert [kind for kind in TYPES if anthropic_tool(kind) is None] == []
    used = {entry.prefix for kind in TYPES if (entry := anthropic_tool(kind)) is not None}
    assert used == {entry.prefix for entry in ANTHROPIC_TOOLS}  # no entry for nothing


@pytest.mark.parametrize("kind", TYPES)
def test_each_type_is_refused_naming_the_tool_why_and_what_to_do(kind: str) -> None:
    error = refused({"type": kind, "name": "the_tool"})
    message = error.body["error"]["message"]
    assert error.status == 400 and error.body["error"]["type"] == "invalid_request_error"
    assert f"tools.0.type: {kind!r} ('the_tool')" in message
    assert "Instead, " in message
    entry = anthropic_tool(kind)
    assert entry is not None
    if kind.startswith(SERVER) or kind == "mcp_toolset":
        assert entry.on_server and "runs on Anthropic's servers" in message, message
    else:  # bash, text editor, computer use, memory, the toolsets: the client runs them
        assert not entry.on_server and "input schema" in message, message
        assert "runs on Anthropic's servers" not in message


def test_a_type_nobody_knows_is_refused_as_unknown() -> None:
    message = refused({"type": "teleport_20990101", "name": "t"}).body["error"]["message"]
    assert "'teleport_20990101'" in message and "not a tool type this proxy knows" in message


def test_the_sdk_gets_the_refusal_and_nothing_goes_upstream() -> None:
    with (
        running_scripted_upstream() as upstream,
        running_proxy(f"{upstream.url}/v1") as proxy,
    ):
        client = anthropic.Anthropic(base_url=proxy, api_key="k", max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(
                model="m",
                max_tokens=16,
                messages=[{"role": "user", "content": "search the web for streamfix"}],
                tools=[{"type": "web_search_20250305", "name": "web_search"}],
            )
        assert upstream.received == []
    message = caught.value.body["error"]["message"]  # type: ignore[index]
    assert "'web_search_20250305' ('web_search')" in message
    assert "runs on Anthropic's servers" in message and "WebSearch" in message
