"""Kimi's call ids through the Messages front, with the real Anthropic Python SDK.

Kimi names its calls `functions.NAME:N`, outside the alphabet Anthropic's API takes for a
`tool_use` id (`^[a-zA-Z0-9_-]+$`): a Claude Code session that kept them is refused when it
resumes against Anthropic (`messages.N.content.M.tool_use.id: String should match pattern`).
Kimi for its part wants its own ids back (its template writes them into the prompt). The fake
is the strict Kimi-like upstream (tests/support/strict_upstream.py) refusing a history whose
ids are not its own shape; two user turns of its tool rounds, streamed and not, each sent back
as the SDK returned it, then the whole transcript sent to a fake of Anthropic's own API.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic
import pytest

from tests.support.anthropic_messages_upstream import running_anthropic_upstream
from tests.support.proxies import running_proxy
from tests.support.strict_upstream import (
    MODEL,
    ScriptedCall,
    TextAnswer,
    ToolRound,
    running_strict_upstream,
)
from tests.support.strict_upstream import TOOLS as CHAT_TOOLS

TOOLS = [
    {
        "name": tool["function"]["name"],
        "description": tool["function"]["description"],
        "input_schema": tool["function"]["parameters"],
    }
    for tool in CHAT_TOOLS
]
ALPHABET = re.compile(r"^[a-zA-Z0-9_-]+$")
QUESTIONS = ("what's new in EV batteries?", "and in Europe?")


def ask(client: anthropic.Anthropic, messages: list[Any], stream: bool) -> Any:
    if stream:
        with client.messages.stream(
            model=MODEL, max_tokens=1024, messages=messages, tools=TOOLS
        ) as events:
            return events.get_final_message()
    return client.messages.create(model=MODEL, max_tokens=1024, messages=messages, tools=TOOLS)


def tool_loop(client: anthropic.Anthropic, stream: bool) -> tuple[list[Any], list[str], list[Any]]:
    """Both user turns, each until no more calls: the transcript, every id the client got, and
    every answer's usage."""
    messages: list[Any] = []
    ids: list[str] = []
    usages: list[Any] = []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        for _ in range(6):
            message = ask(client, messages, stream)
            usages.append(message.usage)
            messages.append({"role": "assistant", "content": message.content})  # as received
            calls = [block for block in message.content if block.type == "tool_use"]
            if not calls:
                break
            ids += [call.id for call in calls]
            results = [
                {"type": "tool_result", "tool_use_id": call.id, "content": f"found {call.name}"}
                for call in calls
            ]
            messages.append({"role": "user", "content": results})
        else:
            pytest.fail("the model never stopped calling tools")
    return messages, ids, usages


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "create"])
def test_kimis_ids_reach_the_client_in_anthropics_alphabet_and_kimi_gets_its_own(
    stream: bool,
) -> None:
    with (
        running_strict_upstream(own_ids_only=True) as (fake, root),
        running_proxy(f"{root}/v1", **{"upstream.profile": "kimi"}) as proxy,
        running_anthropic_upstream() as (anthropic_api, anthropic_url),
    ):
        client = anthropic.Anthropic(base_url=proxy, api_key="sk-kimi", max_retries=0)
        messages, ids, usages = tool_loop(client, stream)
        # Two turns of two tool rounds each, five calls a round, every follow-up accepted.
        assert len(ids) == 20 and len(set(ids)) == 20
        assert fake.rejections == []
        assert len(fake.requests) == 6
        assert all(ALPHABET.match(i) for i in ids), ids
        # Kimi got its own ids back, as it issued them (round two's as the proxy renamed them).
        issued = [
            call["id"]
            for request in fake.requests
            for message in request.body["messages"]
            for call in message.get("tool_calls", ())
        ]
        assert issued and all(re.fullmatch(r"functions\.\w+:\d+", i) for i in issued)
        # Moonshot's usage (inside the finishing choice when streamed) reached the client.
        assert {(u.input_tokens, u.output_tokens) for u in usages} == {(233, 41)}
        # The session resumed against Anthropic's own API: its ids are ones it takes.
        resumed = anthropic.Anthropic(base_url=anthropic_url, api_key="sk-ant", max_retries=0)
        messages.append({"role": "user", "content": "go on"})
        answer = resumed.messages.create(
            model="claude-sonnet-4-5", max_tokens=100, messages=messages, tools=TOOLS
        )
        assert answer.content[0].text == "Resumed."
        assert anthropic_api.refusals == []


def test_ids_already_in_the_alphabet_pass_unchanged() -> None:
    """An upstream whose ids Anthropic takes as they are: the client gets them as sent."""
    calls = (
        ScriptedCall("call_8f3a2b", "search_web", {"query": "LFP"}),
        ScriptedCall("toolu-01_x", "add_memory", {"content": "likes LFP"}),
    )
    script = [ToolRound(calls), TextAnswer("Done.")]
    with (
        running_strict_upstream(script) as (fake, root),
        running_proxy(f"{root}/v1", **{"upstream.profile": "kimi"}) as proxy,
    ):
        client = anthropic.Anthropic(base_url=proxy, api_key="sk-plain", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": QUESTIONS[0]}]
        first = ask(client, messages, stream=True)
        assert [b.id for b in first.content if b.type == "tool_use"] == [c.id for c in calls]
        messages.append({"role": "assistant", "content": first.content})
        results = [{"type": "tool_result", "tool_use_id": c.id, "content": "ok"} for c in calls]
        messages.append({"role": "user", "content": results})
        final = ask(client, messages, stream=False)
        assert final.content[0].text == "Done."
        assert fake.rejections == []
        sent = fake.requests[-1].body["messages"]
        assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == [c.id for c in calls]
