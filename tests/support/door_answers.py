"""What a door's client made of an answer, read the same way for every door: the raw SSE
(events and comments, read independently of the proxy's decoder), what in it says an answer
ended well, an error in each door's own shape (streamed: the door's error event; one body: its
error JSON with the status), and the answer a client holds at the end (`Answer`: text, calls,
finish), so a streamed answer and a whole one through the same door compare equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
from openai.lib.streaming.chat import ChatCompletionStreamState

from tests.support.door_clients import Streamed, Whole

# ── the raw SSE ──────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class RawEvent:
    """One SSE event as sent: its `event:` name, its joined `data:` lines, or a comment."""

    name: str | None
    data: str | None
    comment: str | None = None

    @property
    def json(self) -> Any:
        assert self.data is not None
        return json.loads(self.data)


def raw_events(raw: bytes) -> list[RawEvent]:
    """The events of an SSE body in order, comments among them (an independent reading: the
    proxy's own decoder is what is under test)."""
    events: list[RawEvent] = []
    text = raw.decode().replace("\r\n", "\n")
    for frame in text.split("\n\n"):
        lines = [line for line in frame.split("\n") if line]
        if not lines:
            continue
        name = data = None
        for line in lines:
            if line.startswith(":"):
                events.append(RawEvent(None, None, line[1:].strip()))
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data = value if data is None else f"{data}\n{value}"
        if name is not None or data is not None:
            events.append(RawEvent(name, data))
    return events


def fabricated_ends(door: str, raw: bytes) -> list[str]:
    """What in a door's raw stream says the answer ended well: none of it may follow a failure.
    Chat: `[DONE]`, a finish reason; Responses: `response.completed` or `.incomplete`;
    Messages: `message_stop`, a stop reason."""
    found: list[str] = []
    for event in raw_events(raw):
        if event.data is None:
            continue
        if event.data.strip() == "[DONE]":
            found.append("[DONE]")
            continue
        try:
            data = json.loads(event.data)
        except json.JSONDecodeError:
            continue
        if not isinstance(data, dict):
            continue
        kind = data.get("type")
        if door == "chat":
            for choice in data.get("choices") or ():
                if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                    found.append(f"finish_reason {choice['finish_reason']!r}")
        elif door == "responses" and kind in ("response.completed", "response.incomplete"):
            found.append(str(kind))
        elif door == "messages":
            if kind == "message_stop":
                found.append("message_stop")
            stop = (data.get("delta") or {}).get("stop_reason") if kind == "message_delta" else None
            if stop is not None:
                found.append(f"stop_reason {stop!r}")
    return found


# ── errors in each door's shape ──────────────────────────────────────────────


def stream_error_text(result: Streamed, tail: bytes = b"") -> str:
    """The error a streamed answer ended with, in the door's own form, as its client reads it;
    fails when the stream did not end with one, or when anything in the door's raw stream
    (read to its end) says the answer ended well. `tail`: what the upstream itself sent after
    its error event, which the chat door relays as received and nothing else may follow.

    Chat: an in-band error event (`data: {"error": …}`) last, which openai-python raises as
    `APIError` (its own class: a broken connection would be the `APIConnectionError` subclass).
    Responses: `response.failed` or an `error` event as the last event. Messages: an `error`
    event, which anthropic-python raises as `APIStatusError` with the event's body."""
    door, error, raw = result.door, result.error, result.raw
    assert raw.endswith(tail), raw
    said = raw[: len(raw) - len(tail)]
    assert not fabricated_ends(door, said), (fabricated_ends(door, said), raw)
    data_events = [e for e in raw_events(said) if e.data is not None]
    if door == "chat":
        assert type(error) is openai.APIError, (error, raw)
        assert data_events and isinstance(data_events[-1].json.get("error"), dict), raw
        return f"{error.message} {json.dumps(error.body)}"
    if door == "responses":
        names = [e.json.get("type") for e in data_events]
        assert names and names[-1] in ("response.failed", "error"), names
        if error is not None:  # openai-python raised an in-band `error` object
            assert type(error) is openai.APIError, (error, raw)
            return f"{error.message} {json.dumps(error.body)}"
        kinds = [item.type for item in result.items]
        assert kinds and kinds[-1] in ("response.failed", "error"), kinds
        last = result.items[-1]
        if last.type == "error":
            return str(last.message)
        assert last.response.error is not None, raw
        return str(last.response.error.message)
    assert data_events and data_events[-1].name == "error", raw
    assert isinstance(error, anthropic.APIStatusError), (error, raw)
    body = error.body
    assert isinstance(body, dict) and body.get("type") == "error", body
    assert isinstance(body.get("error"), dict) and isinstance(body["error"].get("type"), str)
    return str(body["error"].get("message"))


def whole_error_text(result: Whole, status: int) -> str:
    """The error body of a non-streamed answer, in the door's own shape with `status`, as the
    client raised it; its message. Chat and Responses: OpenAI's `{"error": {"message": …}}`;
    Messages: Anthropic's `{"type": "error", "error": {"type": …, "message": …}}`."""
    assert result.status == status, (result.status, result.raw)
    sdk_error = openai.APIStatusError if result.door != "messages" else anthropic.APIStatusError
    assert isinstance(result.error, sdk_error), (result.error, result.raw)
    body = result.json
    assert isinstance(body, dict), body
    error = body.get("error")
    assert isinstance(error, dict), body
    if result.door == "messages":
        assert body.get("type") == "error" and isinstance(error.get("type"), str), body
    message = error.get("message")
    assert isinstance(message, str) and message, body
    return message


# ── the answer a client ends with ────────────────────────────────────────────


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class Answer:
    """What a client holds once the answer is in: the text, the calls in order, the finish
    (chat's finish_reason, a response's status, a message's stop_reason)."""

    text: str
    calls: tuple[Call, ...]
    finish: str | None

    @property
    def named_calls(self) -> list[tuple[str, Any]]:
        return [(call.name, call.arguments) for call in self.calls]


CALLS_FINISH = {"chat": "tool_calls", "responses": "completed", "messages": "tool_use"}
"""How each door's answer says it ended with calls for the client to run."""


def answer_of_whole(result: Whole) -> Answer:
    assert result.error is None, (result.error, result.raw)
    # openai-python hands back the body as text when it is not JSON (an event stream relayed).
    assert not isinstance(result.answer, str), f"the client could not parse: {result.raw!r}"
    return _answer(result.door, result.answer)


def answer_of_stream(result: Streamed) -> Answer:
    """The answer a client accumulates from the stream's items, which must end cleanly."""
    assert result.error is None, (result.error, result.raw)
    door = result.door
    if door == "chat":
        state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
        for chunk in result.items:
            state.handle_chunk(chunk)
        return _answer(door, state.get_final_completion())
    if door == "responses":
        last = result.items[-1]
        assert last.type == "response.completed", [item.type for item in result.items]
        return _answer(door, last.response)
    return _messages_stream_answer(result)


def _answer(door: str, answer: Any) -> Answer:
    if door == "chat":
        choice = answer.choices[0]
        message = choice.message
        calls = tuple(
            Call(c.id, c.function.name, json.loads(c.function.arguments))
            for c in message.tool_calls or ()
        )
        return Answer(message.content or "", calls, choice.finish_reason)
    if door == "responses":
        text = "".join(
            part.text
            for item in answer.output
            if item.type == "message"
            for part in item.content
            if part.type == "output_text"
        )
        calls = tuple(
            Call(item.call_id, item.name, json.loads(item.arguments))
            for item in answer.output
            if item.type == "function_call"
        )
        return Answer(text, calls, answer.status)
    text = "".join(block.text for block in answer.content if block.type == "text")
    calls = tuple(
        Call(block.id, block.name, block.input)
        for block in answer.content
        if block.type == "tool_use"
    )
    return Answer(text, calls, answer.stop_reason)


def _messages_stream_answer(result: Streamed) -> Answer:
    """A Messages stream's answer as a client builds it: blocks by index, text and partial
    JSON joined, the stop reason from `message_delta`; it must end with `message_stop`."""
    blocks: dict[int, dict[str, Any]] = {}
    stop: str | None = None
    kinds = [event.type for event in result.items]
    assert kinds and kinds[-1] == "message_stop", kinds
    for event in result.items:
        if event.type == "content_block_start":
            block = event.content_block
            blocks[event.index] = {"type": block.type, "text": "", "json": ""}
            if block.type == "tool_use":
                blocks[event.index].update(id=block.id, name=block.name)
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                blocks[event.index]["text"] += delta.text
            elif delta.type == "input_json_delta":
                blocks[event.index]["json"] += delta.partial_json
        elif event.type == "message_delta":
            stop = event.delta.stop_reason
    ordered = [blocks[index] for index in sorted(blocks)]
    text = "".join(b["text"] for b in ordered if b["type"] == "text")
    calls = tuple(
        Call(b["id"], b["name"], json.loads(b["json"] or "{}"))
        for b in ordered
        if b["type"] == "tool_use"
    )
    return Answer(text, calls, stop)
