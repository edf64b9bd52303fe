"""A door's own query parameters stay at the door (`Door.query_parameters`): Claude Code sends
every request as `POST /v1/messages?beta=true` (the TypeScript SDK calls its beta resources so),
and a chat upstream behind Google's front end refuses a parameter it does not define with 400
`Cannot bind query parameter`. The scripted upstream refuses exactly so; it defines
`api-version` (as Azure's API does), which goes on from any door, and a chat client's own
query goes on as sent: the chat door owns no parameter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.door_clients import serving_proxy
from tests.support.scripted_chat_upstream import (
    ScriptedChatUpstream,
    json_answer,
    running_scripted_upstream,
)

KEY = "sk-query"
MESSAGES = [{"role": "user", "content": "hi"}]
COMPLETION = {
    "id": "chatcmpl-q",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
    ],
}
ANSWER = json_answer(200, COMPLETION)
DROPPED = "door_query_parameter_dropped"


@pytest.fixture(scope="module")
def stage() -> Iterator[tuple[ScriptedChatUpstream, str]]:
    with (
        running_scripted_upstream(defines=frozenset({"api-version"})) as upstream,
        serving_proxy(upstream.url) as proxy,
    ):
        yield upstream, proxy


def repairs(response: httpx.Response | Any) -> str:
    return str(response.headers["x-streamfix-repairs"])


def test_claude_codes_beta_query_stays_at_the_messages_door(
    stage: tuple[ScriptedChatUpstream, str],
) -> None:
    upstream, proxy = stage
    model = upstream.play(ANSWER)
    headers = {
        "x-api-key": KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219",
    }
    body = {"model": model, "max_tokens": 64, "messages": MESSAGES}
    answer = httpx.post(f"{proxy}/v1/messages?beta=true", json=body, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"] == [{"type": "text", "text": "hello"}]
    [sent] = upstream.requests_for(model)
    assert (sent.path, sent.query, sent.refused) == ("/v1/chat/completions", "", None)
    assert f"{DROPPED}:1" in repairs(answer)


@pytest.mark.parametrize("beta", [False, True], ids=["as-it-comes", "beta-query"])
def test_the_anthropic_sdk_through_the_messages_door(
    stage: tuple[ScriptedChatUpstream, str], beta: bool
) -> None:
    # anthropic-python adds no query of its own (its beta resource is a qualifier now); the
    # TypeScript SDK Claude Code is built on still puts `?beta=true` on the URL, as
    # `extra_query` does here. Nothing added, nothing counted.
    upstream, proxy = stage
    model = upstream.play(ANSWER)
    client = anthropic.Anthropic(base_url=proxy, api_key=KEY, max_retries=0)
    raw = client.beta.messages.with_raw_response.create(
        model=model,
        max_tokens=64,
        messages=MESSAGES,
        extra_query={"beta": "true"} if beta else None,
    )
    assert raw.http_request.url.query == (b"beta=true" if beta else b"")
    assert raw.parse().content[0].text == "hello"
    [sent] = upstream.requests_for(model)
    assert (sent.query, sent.refused) == ("", None)
    assert (f"{DROPPED}:1" in raw.headers["x-streamfix-repairs"]) is beta


def test_a_parameter_the_upstream_defines_goes_on_beside_the_dropped_one(
    stage: tuple[ScriptedChatUpstream, str],
) -> None:
    upstream, proxy = stage
    model = upstream.play(ANSWER)
    body = {"model": model, "max_tokens": 64, "messages": MESSAGES}
    answer = httpx.post(
        f"{proxy}/v1/messages?beta=true&api-version=2025-01-01",
        json=body,
        headers={"x-api-key": KEY},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    [sent] = upstream.requests_for(model)
    assert (sent.query, sent.refused) == ("api-version=2025-01-01", None)


def test_a_chat_clients_own_query_goes_on_as_sent(
    stage: tuple[ScriptedChatUpstream, str],
) -> None:
    upstream, proxy = stage
    chat = openai.OpenAI(base_url=f"{proxy}/v1", api_key=KEY, max_retries=0)
    model = upstream.play(ANSWER)
    answer = chat.chat.completions.create(
        model=model, messages=MESSAGES, extra_query={"api-version": "2025-01-01"}
    )
    assert answer.choices[0].message.content == "hello"
    [sent] = upstream.requests_for(model)
    assert (sent.query, sent.refused) == ("api-version=2025-01-01", None)
    # `beta` is no parameter of the chat door's: it goes on, and the upstream's own refusal
    # (Google's, array and all) reaches the chat client as today.
    model = upstream.play(ANSWER)
    with pytest.raises(openai.BadRequestError) as caught:
        chat.chat.completions.create(model=model, messages=MESSAGES, extra_query={"beta": "true"})
    [sent] = upstream.requests_for(model)
    assert sent.query == "beta=true"
    assert 'Unknown name "beta": Cannot bind query parameter' in str(caught.value)
    assert DROPPED not in caught.value.response.headers["x-streamfix-repairs"]
