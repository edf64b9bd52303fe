"""Tool-call markup written as text, through the proxy, read by the real OpenAI Python SDK.

The upstream is tests/support/markup_upstream.py: a vLLM / llama.cpp server whose tool parser
missed, so the model's markup (Hermes, Qwen3-Coder, Kimi K2, GLM, DeepSeek V3.1, Mistral,
MiniMax-M2: markup_upstream.FAMILIES) arrives as `content`, cut in small pieces, with
finish_reason "stop". Behind the real proxy under uvicorn, the SDK must get a
real tool call (name, parsed arguments, an id, finish_reason "tool_calls", no markup left in
the content); the test runs the tool, sends the result back the way an app does, and the fake
answers only if that history is one a chat template can render (it checks the ids, types,
argument strings and tool_call_ids), with text that uses the result.

And where the markup must stay text: a request without tools, a tool the request did not
declare, arguments that fail the tool's schema, `tool_choice: "none"`, and a route with
`text_tool_calls = false`. The `*_without_proxy` test points the SDK straight at the fake: the
markup is text and the turn ends, which is what the proxy changes.

Three ways of reading a turn (sdk_agent.py's): `chat.completions.stream()` (the SDK's helper),
`create(stream=True)` accumulated by index, and `create()`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest

from tests.support.markup_upstream import (
    FAMILIES,
    PARIS,
    MarkupUpstream,
    answer_for,
    final_answer,
    openai_tools,
    running_markup_upstream,
)
from tests.support.proxies import running_proxy

MODES = ("stream", "create-stream", "create")
STREAMED = ("stream", "create-stream")
QUESTION = {"role": "user", "content": "What is the weather in Paris for the next three days?"}
WEATHER = openai_tools("get_weather")
# The proxy's made-up ids (proxy/repair/calls/ids.py).
GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")


# ── fixtures ─────────────────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[MarkupUpstream, str]]:
    with running_markup_upstream() as pair:
        yield pair


@pytest.fixture
def fake(served: tuple[MarkupUpstream, str]) -> MarkupUpstream:
    served[0].clear()
    return served[0]


@pytest.fixture(scope="module")
def upstream_url(served: tuple[MarkupUpstream, str]) -> str:
    return served[1]


@pytest.fixture(scope="module")
def proxy(upstream_url: str) -> Iterator[str]:
    """Default settings (`upstream.text_tool_calls` is on by default), atomic emission; a
    route `raw` (models `*/raw`, the same fake) with `text_tool_calls = false`."""
    raw_route = {
        "name": "raw",
        "models": ["*/raw"],
        "base_url": upstream_url,
        "text_tool_calls": False,
    }
    with running_proxy(upstream_url, routes=[raw_route]) as root:
        yield f"{root}/v1"


@pytest.fixture(scope="module")
def incremental_proxy(upstream_url: str) -> Iterator[str]:
    with running_proxy(upstream_url, **{"tool_calls.emit": "incremental"}) as root:
        yield f"{root}/v1"


@pytest.fixture(scope="module")
def off_proxy(upstream_url: str) -> Iterator[str]:
    with running_proxy(upstream_url, **{"upstream.text_tool_calls": False}) as root:
        yield f"{root}/v1"


# ── reading a turn ───────────────────────────────────────────────────────────


@dataclass
class Turn:
    content: str | None
    calls: list[dict[str, Any]]
    """{"id", "type", "function": {"name", "arguments"}} per call, in index order."""
    finish_reason: str | None
    history: dict[str, Any]
    """The assistant message as an app puts it back in the history."""
    order: list[str] = field(default_factory=list)
    """Streamed (create-stream): "content" / "tool_calls" per delta part, in arrival order."""


def client_for(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0, timeout=30)


def ask(base_url: str, model: str, messages: list[Any], mode: str, **kwargs: Any) -> Turn:
    client = client_for(base_url)
    kwargs = {"model": model, "messages": messages, **kwargs}
    if mode == "stream":
        with client.chat.completions.stream(**kwargs) as stream:
            choice = stream.get_final_completion().choices[0]
        calls = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in choice.message.tool_calls or []
        ]
        history: dict[str, Any] = {"role": "assistant", "content": choice.message.content}
        if calls:
            history["tool_calls"] = calls
        return Turn(choice.message.content, calls, choice.finish_reason, history)
    if mode == "create-stream":
        content: str | None = None
        by_index: dict[Any, dict[str, Any]] = {}
        order: list[str] = []
        finish = None
        with client.chat.completions.create(stream=True, **kwargs) as stream:
            for chunk in stream:
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        content = (content or "") + delta.content
                        order.append("content")
                    for tc in delta.tool_calls or []:
                        order.append("tool_calls")
                        call = by_index.setdefault(
                            tc.index,
                            {
                                "id": "",
                                "type": "function",
                                "function": {"name": "", "arguments": ""},
                            },
                        )
                        call["id"] += tc.id or ""
                        if tc.function:
                            call["function"]["name"] += tc.function.name or ""
                            call["function"]["arguments"] += tc.function.arguments or ""
                    finish = choice.finish_reason or finish
        calls = [by_index[i] for i in sorted(by_index)]
        history = {"role": "assistant", "content": content}
        if calls:
            history["tool_calls"] = calls
        return Turn(content, calls, finish, history, order)
    completion = client.chat.completions.create(**kwargs)
    choice = completion.choices[0]
    calls = [c.model_dump(exclude_none=True) for c in choice.message.tool_calls or []]
    history = choice.message.model_dump(exclude_none=True)
    if not history.get("tool_calls"):
        history.pop("tool_calls", None)  # vLLM's `[]` is not sent back
    return Turn(choice.message.content, calls, choice.finish_reason, history)


def named_arguments(turn: Turn) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in turn.calls]


def run_tools(turn: Turn) -> tuple[list[dict[str, Any]], list[str]]:
    """The app runs each call: a `tool` message per call, and the results in order."""
    messages, results = [], []
    for call in turn.calls:
        arguments = json.loads(call["function"]["arguments"])
        result = json.dumps({"city": arguments["city"], "forecast": ["sun"] * arguments["days"]})
        results.append(result)
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return messages, results


def assert_no_markup(family: str, content: str | None) -> None:
    for marker in FAMILIES[family].markers:
        assert marker not in (content or ""), f"{marker!r} left in content: {content!r}"


def assert_ids(family: str, model: str, turn: Turn) -> None:
    ids = [c["id"] for c in turn.calls]
    assert all(isinstance(i, str) and i for i in ids), ids
    assert len(set(ids)) == len(ids), ids
    answer = answer_for(model)
    for position, call_id in enumerate(ids):
        wrote = answer.call_id(position)
        if wrote is not None:
            # Kimi K2's template renders the id back: the one the model wrote is kept.
            assert call_id == wrote
        else:
            # Made up: the proxy's shape, or the one the family's server insists on.
            rule = answer.family.id_rule or GENERATED_ID
            assert rule.fullmatch(call_id), call_id


# ── a call, run, and the second turn ─────────────────────────────────────────

VARIANTS = {
    "": "one call",
    "/parallel": "two calls, in the order written",
    "/prefixed": "text before the call stays content, before the call",
}


def assert_round_trip(fake: MarkupUpstream, base_url: str, model: str, mode: str) -> None:
    """Turn one gives the calls the model wrote as real tool calls; the app runs them and
    sends the results; turn two (accepted by the fake's template check) answers with them."""
    answer = answer_for(model)
    family = answer.family.name
    messages: list[Any] = [QUESTION]
    turn = ask(base_url, model, messages, mode, tools=WEATHER)
    assert named_arguments(turn) == answer.calls
    assert turn.finish_reason == "tool_calls"
    assert all(c["type"] == "function" for c in turn.calls)
    assert_ids(family, model, turn)
    if answer.prefix:
        # The words the model wrote before its call, all of them and nothing of the markup
        # (the line break between them and the call may go with the markup).
        assert (turn.content or "").rstrip() == answer.prefix.rstrip()
        assert_no_markup(family, turn.content)
    else:
        assert not turn.content, f"content left: {turn.content!r}"
    if turn.order:
        first_call = turn.order.index("tool_calls")
        assert "content" not in turn.order[first_call:], turn.order
    tool_messages, results = run_tools(turn)
    messages += [turn.history, *tool_messages]
    final = ask(base_url, model, messages, mode, tools=WEATHER)
    assert fake.rejections == []
    assert final.content == final_answer(results)
    assert final.calls == []
    assert final.finish_reason == "stop"
    # What reached the upstream the second time: the calls, each answered by its id.
    sent = fake.chat_requests[-1]["messages"]
    assert [c["function"]["name"] for c in sent[1]["tool_calls"]] == [n for n, _ in answer.calls]
    assert [m["tool_call_id"] for m in sent[2:]] == [c["id"] for c in turn.calls]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", VARIANTS, ids=[v or "/one" for v in VARIANTS])
@pytest.mark.parametrize("family", FAMILIES)
def test_markup_becomes_tool_calls_and_the_second_turn_answers(
    fake: MarkupUpstream, proxy: str, family: str, variant: str, mode: str
) -> None:
    assert_round_trip(fake, proxy, family + variant, mode)


@pytest.mark.parametrize("mode", STREAMED)
@pytest.mark.parametrize("variant", VARIANTS, ids=[v or "/one" for v in VARIANTS])
@pytest.mark.parametrize("family", FAMILIES)
def test_incremental_emission_gives_the_same_calls(
    fake: MarkupUpstream, incremental_proxy: str, family: str, variant: str, mode: str
) -> None:
    assert_round_trip(fake, incremental_proxy, family + variant, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", VARIANTS, ids=[v or "/one" for v in VARIANTS])
@pytest.mark.parametrize("family", FAMILIES)
def test_control_a_working_parser_passes_the_same_checks(
    family: str, variant: str, mode: str
) -> None:
    # The same server with its tool parser working, no proxy: what the checks above accept.
    with running_markup_upstream(parser=True) as (control, url):
        assert_round_trip(control, url, family + variant, mode)


# ── where the markup stays text ──────────────────────────────────────────────


def assert_text(turn: Turn, text: str) -> None:
    assert turn.content == text
    assert turn.calls == []
    assert turn.finish_reason == "stop"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_request_without_tools_gets_the_markup_as_content(
    proxy: str, family: str, mode: str
) -> None:
    assert_text(ask(proxy, family, [QUESTION], mode), answer_for(family).text)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_an_undeclared_tool_stays_text(proxy: str, family: str, mode: str) -> None:
    turn = ask(proxy, family, [QUESTION], mode, tools=openai_tools("get_time"))
    assert_text(turn, answer_for(family).text)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_arguments_that_fail_the_schema_stay_text(proxy: str, family: str, mode: str) -> None:
    model = f"{family}/invalid"  # "days": "three" where the schema says integer
    assert_text(ask(proxy, model, [QUESTION], mode, tools=WEATHER), answer_for(model).text)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_tool_choice_none_leaves_text(proxy: str, family: str, mode: str) -> None:
    turn = ask(proxy, family, [QUESTION], mode, tools=WEATHER, tool_choice="none")
    assert_text(turn, answer_for(family).text)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_text_tool_calls_off_leaves_text(off_proxy: str, family: str, mode: str) -> None:
    assert_text(ask(off_proxy, family, [QUESTION], mode, tools=WEATHER), answer_for(family).text)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_route_with_text_tool_calls_off_leaves_text(proxy: str, family: str, mode: str) -> None:
    # The same proxy: its `raw` route (text_tool_calls = false) leaves the markup as text, its
    # default upstream (on) turns the same markup into a call.
    raw = ask(proxy, f"{family}/raw", [QUESTION], mode, tools=WEATHER)
    assert_text(raw, answer_for(family).text)
    default = ask(proxy, family, [QUESTION], mode, tools=WEATHER)
    assert named_arguments(default) == [("get_weather", PARIS)]


# ── without the proxy ────────────────────────────────────────────────────────


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_without_proxy_the_markup_is_text_and_the_turn_ends(
    fake: MarkupUpstream, upstream_url: str, family: str, mode: str
) -> None:
    turn = ask(upstream_url, family, [QUESTION], mode, tools=WEATHER)
    assert_text(turn, answer_for(family).text)
    # An app that answers the "call" anyway, keeping the text as it came, is turned away.
    history = {"role": "assistant", "content": turn.content}
    tool = {"role": "tool", "tool_call_id": "call_0", "content": "{}"}
    with pytest.raises(openai.BadRequestError, match="has no tool_calls"):
        ask(upstream_url, family, [QUESTION, history, tool], mode, tools=WEATHER)
    assert len(fake.rejections) == 1
