"""Tool names the upstream refuses, through the real proxy, driven by the real OpenAI SDK.

The upstream is tests/support/tool_name_upstream.py: Gemini's OpenAI endpoint (a route with
the gemini profile, whose rule is Gemini's) or an OpenAI-like one (a route with
`tool_names = "openai"`), each refusing a bad name with its own 400 and calling the first tool
by the name it was sent. Two turns: the model calls the tool, the client sends the result
back. The client only ever sees the name it declared; the upstream, in both requests, only
names it accepts, and the same one for the same tool.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.support.proxies import running_proxy
from tests.support.tool_name_upstream import (
    ANSWER_PREFIX,
    ARGUMENTS,
    GEMINI_NAME_MESSAGE,
    ToolNameUpstream,
    declared_names,
    history_names,
    running_tool_name_upstream,
)

LONG = "mcp__enterprise-database-management__synchronize-all-customer-data-across-systems"
READ = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
ROUTES = {
    "gemini": {"upstream.profile": "gemini"},
    "openai": {"upstream.tool_names": "openai"},
}
NAMES = {
    "gemini": ("mcp/server/read", "2fa read", LONG),
    "openai": ("files.read", "mcp/server/read", LONG),
}


def tools(name: str) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": name, "parameters": READ}},
        {"type": "function", "function": {"name": "list_dir", "parameters": READ}},
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


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)


def first_call(
    sdk: openai.OpenAI, messages: list[Any], name: str, stream: bool
) -> tuple[str, str, str]:
    """(id, name, arguments) of the one call the SDK assembled."""
    request: dict[str, Any] = {"model": "m", "messages": messages, "tools": tools(name)}
    if not stream:
        message = sdk.chat.completions.create(**request).choices[0].message
        (call,) = message.tool_calls or []
        return call.id, call.function.name, call.function.arguments
    with sdk.chat.completions.stream(**request) as events:
        for _ in events:
            pass
        (call,) = events.get_final_completion().choices[0].message.tool_calls or []
    return call.id, call.function.name, call.function.arguments


def final_text(sdk: openai.OpenAI, messages: list[Any], name: str, stream: bool) -> str:
    request: dict[str, Any] = {"model": "m", "messages": messages, "tools": tools(name)}
    if not stream:
        return sdk.chat.completions.create(**request).choices[0].message.content or ""
    chunks = sdk.chat.completions.create(**request, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_two_turns_with_a_name_the_upstream_refuses(
    served: tuple[ToolNameUpstream, str, str], fake: ToolNameUpstream, index: int, stream: bool
) -> None:
    name = NAMES[fake.rule][index]
    assert not fake.accepts(name)
    sdk = client(served[2])
    messages: list[Any] = [{"role": "user", "content": "read a.txt"}]
    call_id, called, arguments = first_call(sdk, messages, name, stream)
    assert called == name  # the client's name, never the upstream's
    assert json.loads(arguments) == ARGUMENTS
    call = {"id": call_id, "type": "function", "function": {"name": called, "arguments": arguments}}
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "hello"},
    ]
    assert final_text(sdk, messages, name, stream) == ANSWER_PREFIX + "hello"

    assert fake.rejections == []
    first, second = fake.chat_requests
    sent = declared_names(first)
    assert all(fake.accepts(n) for n in sent + declared_names(second) + history_names(second))
    assert declared_names(second) == sent and sent[1] == "list_dir"
    assert history_names(second) == [sent[0]]  # the call under the name the tool was sent as


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_without_renaming_the_upstream_refuses_with_its_own_body(
    served: tuple[ToolNameUpstream, str, str], fake: ToolNameUpstream, stream: bool
) -> None:
    # The control: the same request straight to the fake, and through a route that keeps
    # the names (`tool_names = "none"`), gets the upstream's 400.
    name = NAMES[fake.rule][0]
    kept = {**ROUTES[fake.rule], "upstream.tool_names": "none"}
    with running_proxy(served[1], **kept) as root:
        for base in (served[1], f"{root}/v1"):
            with pytest.raises(openai.BadRequestError) as refused:
                first_call(client(base), [{"role": "user", "content": "go"}], name, stream)
            body = refused.value.response.json()
            if fake.rule == "gemini":
                message = GEMINI_NAME_MESSAGE.format(index=0)
                error = {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
                # Straight from Google, its array; through the proxy, the object inside it.
                assert body == ([error] if base == served[1] else error)
            else:
                assert body["error"]["param"] == "tools[0].function.name"
                assert body["error"]["code"] == "invalid_value"
    assert len(fake.rejections) == 2


def test_a_request_whose_names_are_accepted_goes_upstream_byte_for_byte(
    served: tuple[ToolNameUpstream, str, str], fake: ToolNameUpstream
) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "read a.txt"}],
        "tools": tools("files_read"),
    }
    raw = orjson.dumps(body)
    response = httpx.post(
        f"{served[2]}/chat/completions",
        content=raw,
        headers={"content-type": "application/json", "authorization": "Bearer sk-test"},
    )
    assert response.status_code == 200, response.text
    assert fake.requests[0].raw == raw
    assert response.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == (
        "files_read"
    )
