"""The real Anthropic Python SDK through the Messages front (POST /v1/messages), in front of
fake chat upstreams that enforce their receipt rules: Gemini (indexless calls, "stop" after
calls, thought signatures required back), DeepSeek (`reasoning_content` required back) and
OpenRouter (`reasoning_details` required back). A hand-run tool loop sends the content blocks
back as the SDK returned them, over two user turns, streamed (`messages.stream`) and not
(`messages.create`). The upstream's acceptance of every follow-up is the judge."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx
import pytest

from tests.fronts.messages_checks import parse, violations
from tests.support.gemini_upstream import TOOL_SCHEMAS, TWO_STEPS, TextStep, running_gemini_upstream
from tests.support.markup_upstream import PARIS, running_markup_upstream
from tests.support.markup_upstream import TOOL_SCHEMAS as MARKUP_SCHEMAS
from tests.support.proxies import running_proxy
from tests.support.reasoning_upstreams import (
    TWO_TURNS,
    running_deepseek_upstream,
    running_openrouter_upstream,
)
from tests.support.tool_name_upstream import running_tool_name_upstream

TOOLS = [{"name": name, "description": name, "input_schema": s} for name, s in TOOL_SCHEMAS.items()]
QUESTIONS = ("read a.txt and b.txt, list the directory", "now read c.txt")


@contextmanager
def upstream(kind: str) -> Iterator[tuple[Any, str, str]]:
    """(fake, the proxy's root URL, the model) for one kind of fake chat upstream."""
    if kind == "gemini":
        with (
            running_gemini_upstream(TWO_STEPS) as (fake, root),
            running_proxy(f"{root}/v1beta/openai", **{"upstream.profile": "gemini"}) as proxy,
        ):
            yield fake, proxy, "gemini-3-flash-preview"
    elif kind == "deepseek":
        with (
            running_deepseek_upstream() as (fake, root),
            running_proxy(f"{root}/v1", **{"upstream.profile": "deepseek"}) as proxy,
        ):
            yield fake, proxy, "deepseek-v4-flash"
    else:
        with (
            running_openrouter_upstream() as (fake, root),
            running_proxy(f"{root}/api/v1", **{"upstream.profile": "openrouter"}) as proxy,
        ):
            yield fake, proxy, "google/gemini-3-pro-preview"


def ask(client: anthropic.Anthropic, model: str, messages: list[Any], stream: bool) -> Any:
    if stream:
        with client.messages.stream(
            model=model, max_tokens=1024, messages=messages, tools=TOOLS
        ) as events:
            for _ in events:
                pass
            return events.get_final_message()
    return client.messages.create(model=model, max_tokens=1024, messages=messages, tools=TOOLS)


def tool_loop(client: anthropic.Anthropic, model: str, stream: bool) -> list[str]:
    """Two user turns, each run until the model stops calling tools; the final texts."""
    messages: list[Any] = []
    finals = []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        for _ in range(6):
            message = ask(client, model, messages, stream)
            messages.append({"role": "assistant", "content": message.content})  # as received
            calls = [block for block in message.content if block.type == "tool_use"]
            assert (message.stop_reason == "tool_use") == bool(calls), message
            if not calls:
                finals.append("".join(b.text for b in message.content if b.type == "text"))
                break
            results = [
                {"type": "tool_result", "tool_use_id": call.id, "content": f"{call.name} ok"}
                for call in calls
            ]
            messages.append({"role": "user", "content": results})
    return finals


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "create"])
@pytest.mark.parametrize("kind", ["gemini", "deepseek", "openrouter"])
def test_a_two_turn_tool_loop_is_accepted_by_the_upstream(kind: str, stream: bool) -> None:
    with upstream(kind) as (fake, proxy, model):
        client = anthropic.Anthropic(base_url=proxy, api_key="k-client", max_retries=0)
        finals = tool_loop(client, model, stream)
        if kind == "gemini":
            assert fake.rejections == 0
            expected = [s.text for s in TWO_STEPS if isinstance(s, TextStep)] * 2
        else:
            assert fake.rejections == []
            expected = [next(s.text for s in turn if isinstance(s, TextStep)) for turn in TWO_TURNS]
        assert finals == expected
        # The key reached the upstream as a chat upstream expects it.
        assert all(r.headers.get("authorization") == "Bearer k-client" for r in fake.requests)
        assert all("anthropic-version" not in r.headers for r in fake.requests)


def test_the_raw_stream_keeps_the_client_rules_and_signs_thinking() -> None:
    with upstream("deepseek") as (_, proxy, model):
        body = {
            "model": model,
            "max_tokens": 100,
            "stream": True,
            "messages": [{"role": "user", "content": QUESTIONS[0]}],
            "tools": TOOLS,
        }
        headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
        answer = httpx.post(f"{proxy}/v1/messages", json=body, headers=headers, timeout=30)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert "x-streamfix-repairs" in answer.headers
        events = parse(answer.content)
        assert violations(events) == []
        thinking = [
            e
            for e in events
            if e["type"] == "content_block_start" and e["content_block"]["type"] == "thinking"
        ]
        assert thinking
        signatures = [
            e["delta"]["signature"]
            for e in events
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "signature_delta"
        ]
        assert signatures and all(signatures)


def test_a_tampered_signature_is_dropped_and_counted() -> None:
    with upstream("deepseek") as (fake, proxy, model):
        client = anthropic.Anthropic(base_url=proxy, api_key="k", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": QUESTIONS[0]}]
        message = ask(client, model, messages, stream=True)
        content = [block.model_dump() for block in message.content]
        for block in content:
            if block["type"] == "thinking":
                block["signature"] = block["signature"][:-3] + "xyz"
        messages.append({"role": "assistant", "content": content})
        calls = [b for b in content if b["type"] == "tool_use"]
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c["id"], "content": "ok"} for c in calls
                ],
            }
        )
        raw = client.messages.with_raw_response.create(
            model=model, max_tokens=100, messages=messages, tools=TOOLS
        )
        assert "thinking_signature_dropped:1" in raw.headers["x-streamfix-repairs"]
        # The receipt still came back from the store by the turn's call ids.
        assert fake.rejections == []


def test_refusals_are_in_anthropics_shape() -> None:
    with upstream("deepseek") as (_, proxy, model):
        client = anthropic.Anthropic(base_url=proxy, api_key="k", max_retries=0)
        never_issued = [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}],
            }
        ]
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(model=model, max_tokens=10, messages=never_issued)
        assert caught.value.body["error"]["type"] == "invalid_request_error"
        assert "toolu_x" in caught.value.body["error"]["message"]
        unknown = [{"role": "user", "content": [{"type": "container_upload", "file_id": "f"}]}]
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(model=model, max_tokens=10, messages=unknown)


def test_count_tokens_is_an_estimate_that_says_so() -> None:
    with upstream("deepseek") as (_, proxy, model):
        client = anthropic.Anthropic(base_url=proxy, api_key="k", max_retries=0)
        raw = client.messages.with_raw_response.count_tokens(
            model=model, messages=[{"role": "user", "content": "hello " * 100}]
        )
        assert raw.headers["x-streamfix-token-count"] == "estimate"
        assert 100 < raw.parse().input_tokens < 400


MCP_NAME = "mcp__filesystem_server_with_a_long_name__read_text_file_from_the_workspace"


@pytest.mark.parametrize("rule", ["gemini", "openai"])
def test_an_mcp_tool_name_over_64_characters_is_renamed_and_restored(rule: str) -> None:
    """Claude Code's MCP tools (`mcp__server__tool`, often over 64 characters): the upstream
    sees a name it accepts, the client its own name back, and the follow-up is accepted."""
    routes = {"gemini": {"upstream.profile": "gemini"}, "openai": {"upstream.tool_names": "openai"}}
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    tools = [{"name": MCP_NAME, "description": "read", "input_schema": schema}]
    with (
        running_tool_name_upstream(rule) as (fake, url),
        running_proxy(url, **routes[rule]) as proxy,
    ):
        client = anthropic.Anthropic(base_url=proxy, api_key="k", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "read a.txt"}]
        first = client.messages.create(model="m", max_tokens=100, messages=messages, tools=tools)
        (call,) = [block for block in first.content if block.type == "tool_use"]
        assert call.name == MCP_NAME
        assert call.input == {"path": "a.txt"}
        messages.append({"role": "assistant", "content": first.content})
        result = {"type": "tool_result", "tool_use_id": call.id, "content": "hello"}
        messages.append({"role": "user", "content": [result]})
        with client.messages.stream(
            model="m", max_tokens=100, messages=messages, tools=tools
        ) as events:
            final = events.get_final_message()
        assert final.stop_reason == "end_turn"
        assert "hello" in final.content[0].text
        assert fake.rejections == []
        assert all(MCP_NAME not in json.dumps(r) for r in fake.chat_requests)


@pytest.mark.parametrize("family", ["hermes", "qwen3_coder", "kimi_k2", "glm", "deepseek_v41"])
def test_tool_calls_written_as_text_become_tool_use_blocks(family: str) -> None:
    """A vLLM / llama.cpp model whose tool parser missed: its markup arrives as text, the chat
    side turns it into calls, and the Anthropic SDK gets `tool_use` blocks; the follow-up is
    rendered the way the model's chat template wants it."""
    tools = [
        {"name": name, "description": name, "input_schema": schema}
        for name, schema in MARKUP_SCHEMAS.items()
    ]
    with running_markup_upstream() as (fake, url), running_proxy(url) as proxy:
        client = anthropic.Anthropic(base_url=proxy, api_key="k", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
        with client.messages.stream(
            model=family, max_tokens=200, messages=messages, tools=tools
        ) as events:
            first = events.get_final_message()
        calls = [block for block in first.content if block.type == "tool_use"]
        assert [(c.name, c.input) for c in calls] == [("get_weather", PARIS)]
        assert first.stop_reason == "tool_use"
        assert not any("<" in b.text for b in first.content if b.type == "text")
        messages.append({"role": "assistant", "content": first.content})
        results = [{"type": "tool_result", "tool_use_id": c.id, "content": "sunny"} for c in calls]
        messages.append({"role": "user", "content": results})
        final = client.messages.create(model=family, max_tokens=200, messages=messages, tools=tools)
        assert final.stop_reason == "end_turn"
        assert fake.rejections == []
