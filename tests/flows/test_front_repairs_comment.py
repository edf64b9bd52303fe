"""`x-streamfix-debug: 1` on the fronts: a Responses or Messages client that asks sees its
stream's own repairs as an SSE comment (`: streamfix-repairs …`) right before the terminal
events (`response.completed`; `message_delta` and `message_stop`), as a chat client sees them
before `[DONE]`; the head's `x-streamfix-repairs` went out before the stream's repairs
happened. The real SDKs still read the answer whole (every SSE parser skips a comment). The
upstream streams a tool call as Gemini does: no `index`, `role` on every delta,
`finish_reason: "stop"` after the call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import orjson
import pytest

from tests.support.door_answers import raw_events
from tests.support.door_clients import KEY, MESSAGES_TOOLS, RESPONSES_TOOLS, Tee, serving_proxy
from tests.support.scripted_chat_upstream import Script, ScriptedChatUpstream

ENVELOPE = {"id": "chatcmpl-g", "object": "chat.completion.chunk", "created": 1, "model": "g"}
CALL = {"id": "call_g1", "type": "function", "function": {"name": "get_weather"}}


def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"role": "assistant", **delta}, "finish_reason": finish}
    return b"data: " + orjson.dumps({**ENVELOPE, "choices": [choice]}) + b"\n\n"


GEMINI_INDEXLESS_CALL = Script(
    [
        event(
            {"tool_calls": [{**CALL, "function": {**CALL["function"], "arguments": '{"city":'}}]}
        ),
        event({"tool_calls": [{"function": {"arguments": '"Montevideo"}'}}]}),
        event({}, "stop"),
        b"data: [DONE]\n\n",
    ]
)
STREAM_KIND = "tool_call_index_added"
TERMINAL = {"responses": ["response.completed"], "messages": ["message_delta", "message_stop"]}
"""The events that end a clean stream, the comment right before them."""


@pytest.fixture(scope="module")
def proxy(scripted_upstream: ScriptedChatUpstream) -> Iterator[str]:
    with serving_proxy(scripted_upstream.url) as url:
        yield url


def ask(door: str, proxy: str, model: str, debug: bool) -> tuple[list[Any], bytes, str]:
    """The door's SDK streams `model`: its items, the raw body, the head's repairs."""
    headers = {"x-streamfix-debug": "1"} if debug else {}
    tee = Tee()
    with httpx2.Client(transport=tee, timeout=10) as http:
        if door == "responses":
            sdk = openai.OpenAI(
                base_url=f"{proxy}/v1", api_key=KEY, max_retries=0, http_client=http
            )
            stream: Any = sdk.responses.with_streaming_response.create(
                model=model,
                input="weather?",
                tools=RESPONSES_TOOLS,
                stream=True,
                extra_headers=headers,
            )
        else:
            claude = anthropic.Anthropic(
                base_url=proxy, api_key=KEY, max_retries=0, http_client=http
            )
            stream = claude.messages.with_streaming_response.create(
                model=model,
                max_tokens=64,
                messages=[{"role": "user", "content": "weather?"}],
                tools=MESSAGES_TOOLS,
                stream=True,
                extra_headers=headers,
            )
        with stream as response:
            head = response.headers["x-streamfix-repairs"]
            items = list(response.parse())
    return items, bytes(tee.bodies[-1]), head


def called(door: str, items: list[Any]) -> dict[str, Any]:
    """The one call the SDK read, as name and arguments."""
    if door == "responses":
        [done] = [i for i in items if i.type == "response.completed"]
        [call] = [o for o in done.response.output if o.type == "function_call"]
        return {"name": call.name, "arguments": orjson.loads(call.arguments)}
    blocks = [i.content_block for i in items if i.type == "content_block_start"]
    [block] = [b for b in blocks if b.type == "tool_use"]
    text = "".join(i.delta.partial_json for i in items if i.type == "content_block_delta")
    stop = [i for i in items if i.type == "message_delta"][-1].delta.stop_reason
    assert stop == "tool_use"
    return {"name": block.name, "arguments": orjson.loads(text)}


@pytest.mark.parametrize("door", ["responses", "messages"])
def test_the_streams_repairs_come_before_the_terminal_event(
    scripted_upstream: ScriptedChatUpstream, proxy: str, door: str
) -> None:
    model = scripted_upstream.play(GEMINI_INDEXLESS_CALL)
    items, raw, head = ask(door, proxy, model, debug=True)
    assert called(door, items) == {"name": "get_weather", "arguments": {"city": "Montevideo"}}
    events = raw_events(raw)
    [comment] = [e for e in events if e.comment and e.comment.startswith("streamfix-repairs ")]
    after = events[events.index(comment) + 1 :]
    assert [e.name for e in after] == TERMINAL[door], after  # and nothing after them
    shown = dict(pair.split(":") for pair in comment.comment.split(" ", 1)[1].split(","))
    assert int(shown[STREAM_KIND]) >= 1, comment
    assert STREAM_KIND not in head  # the head went out before the stream's repairs


@pytest.mark.parametrize("door", ["responses", "messages"])
def test_no_comment_unless_asked(
    scripted_upstream: ScriptedChatUpstream, proxy: str, door: str
) -> None:
    model = scripted_upstream.play(GEMINI_INDEXLESS_CALL)
    items, raw, _ = ask(door, proxy, model, debug=False)
    assert called(door, items)["name"] == "get_weather"
    assert b"streamfix-repairs" not in raw
