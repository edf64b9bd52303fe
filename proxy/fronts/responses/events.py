"""Repaired chat chunks -> Responses events, in the order real clients require.

Fed one repaired chat-completion chunk at a time (`feed`), then told how the stream ended
(`settle` closes the items, `terminal` says how the response ended; `finish` is both). Pure:
no I/O. Between `settle` and `terminal` the caller writes what `turn()` and `output` hold to
the store: clients fire their next request the moment the terminal arrives. The interface is
every front's (fronts/translator.py).

The sequence (RESPONSES.md §1, from OpenAI's own captures): `response.created`,
`response.in_progress`; per item `output_item.added` before any delta and `output_item.done`
after the last; for text `content_part.added` / `output_text.delta` / `output_text.done` /
`content_part.done`; for reasoning `reasoning_summary_part.added` /
`reasoning_summary_text.delta` / `.done` / `reasoning_summary_part.done`; for calls
`function_call_arguments.delta` / `.done` (a custom tool's `custom_tool_call_input.delta` /
`.done`). `sequence_number` rises from 0, `output_index` is dense in output order, deltas name
the item id (never the call id), and the ids in `done` and in the terminal response are the
ones in `added`. Exactly one terminal: `response.completed`, `response.incomplete`
(`max_output_tokens` when the upstream said `length`, `content_filter`) or `response.failed`.
Late usage (a chunk after the finish) is waited for: the terminal goes out at the end.

Only one item is open at a time, but for calls: chat streams parallel calls by `index`, and a
call's arguments may continue after another started, so every call stays open until something
else starts or the stream ends. Text after calls is a new message item (kept, not dropped).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from proxy.fronts.responses.request import CUSTOM_INPUT, NAMESPACE_SEPARATOR, Translation
from proxy.fronts.translator import CLEAN, Aborted, Clean, End, UpstreamError
from proxy.fronts.turns import TurnReceipts, call_extras

__all__ = ["CLEAN", "End", "ResponsesEvents", "aborted", "upstream_error", "whole"]

Chunk = dict[str, Any]
Event = dict[str, Any]


def upstream_error(body: dict[str, Any]) -> End:
    return UpstreamError(body)


def aborted(message: str, code: str = "stream_aborted") -> End:
    return Aborted(message, code)


def new_id(prefix: str) -> str:
    return prefix + os.urandom(12).hex()


@dataclass
class _Item:
    kind: Literal["reasoning", "message", "function_call", "custom_tool_call"]
    id: str
    index: int
    text: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    namespace: str | None = None
    chat_index: int = -1
    open: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    """A call's fields beside id/type/function (Gemini's signature), for the transcript."""

    def joined(self) -> str:
        if len(self.text) > 1:
            self.text[:] = ["".join(self.text)]
        return self.text[0] if self.text else ""


class ResponsesEvents:
    """One response's event stream, built from the repaired chat chunks."""

    def __init__(
        self,
        translation: Translation,
        request: dict[str, Any],
        response_id: str | None = None,
        token: str | None = None,
        created_at: int | None = None,
        item_id: Callable[[str], str] = new_id,
    ) -> None:
        self.translation = translation
        self.request = request
        self.id = response_id or new_id("resp_")
        self._item_id = item_id
        """An item's id from its prefix (a replay gives the recorded ones back)."""
        self.token = token
        """The receipt token minted for this response's turn (None: no tenant, none kept)."""
        self.created_at = int(time.time()) if created_at is None else created_at
        self.items: list[_Item] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.status = "in_progress"
        self.error: dict[str, Any] | None = None
        self.incomplete: dict[str, Any] | None = None
        self._sequence = 0
        self._calls: dict[int, _Item] = {}
        self._current: _Item | None = None  # the open reasoning or message item
        self._receipts = TurnReceipts()  # the assistant message's own extra fields
        self._started = False
        self.counts: dict[str, int] = {}
        """The events translation changes nothing it could count: always empty."""

    @property
    def answer_id(self) -> str:
        return self.id

    # ── the stream ──────────────────────────────────────────────────────────

    def start(self) -> list[bytes]:
        """`response.created` and `response.in_progress` (sent before the first chunk)."""
        if self._started:
            return []
        self._started = True
        return [
            self._event("response.created", response=self.response()),
            self._event("response.in_progress", response=self.response()),
        ]

    def keepalive(self) -> bytes:
        """While the upstream is silent: an event that resets the client's idle timer (Codex
        gives up after 300 s) and means nothing else."""
        return self._event("response.in_progress", response=self.response())

    def heartbeat(self) -> list[bytes]:
        return [*self.start(), self.keepalive()]

    def feed(self, chunk: Chunk) -> list[bytes]:
        out = self.start()
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if isinstance(delta, dict):
                out += self._delta(delta)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return out

    def _delta(self, delta: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        self._receipts.feed(delta)
        spoken = any(isinstance(delta.get(n), str) for n in ("reasoning_content", "reasoning"))
        for name, value in delta.items():
            if name in ("reasoning_content", "reasoning") and isinstance(value, str):
                out += self._reasoning(value)
            elif name == "reasoning_details" and isinstance(value, list) and not spoken:
                # OpenRouter also says it as `reasoning`: shown once
                out += self._reasoning("".join(_detail_text(piece) for piece in value))
        for text in (delta.get("content"), delta.get("refusal")):
            if isinstance(text, str) and text:
                out += self._text(text)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    out += self._call(call)
        return out

    def _reasoning(self, text: str) -> list[bytes]:
        if not text:
            return []
        out: list[bytes] = []
        item = self._current
        if item is None or item.kind != "reasoning":
            out += self._close_all()
            item = self._open("reasoning", "rs_")
            out.append(self._added(item))
            out.append(self._part_event("response.reasoning_summary_part.added", item, ""))
        item.text.append(text)
        out.append(
            self._event(
                "response.reasoning_summary_text.delta",
                item_id=item.id,
                output_index=item.index,
                summary_index=0,
                delta=text,
            )
        )
        return out

    def _text(self, text: str) -> list[bytes]:
        out: list[bytes] = []
        item = self._current
        if item is None or item.kind != "message":
            out += self._close_all()
            item = self._open("message", "msg_")
            out.append(self._added(item))
            out.append(self._part_event("response.content_part.added", item, ""))
        item.text.append(text)
        out.append(
            self._event(
                "response.output_text.delta",
                item_id=item.id,
                output_index=item.index,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )
        return out

    def _call(self, call: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        position = call.get("index")
        position = position if isinstance(position, int) else len(self._calls)
        function = call.get("function") or {}
        item = self._calls.get(position)
        if item is None or not item.open:
            out += self._close_current()
            name = str(function.get("name") or "")
            custom = name in self.translation.custom_tools
            item = self._open(
                "custom_tool_call" if custom else "function_call", "ctc_" if custom else "fc_"
            )
            item.chat_index = position
            item.call_id = str(call.get("id") or new_id("call_"))
            item.name, item.namespace = name, None
            if name in self.translation.namespaced:
                item.namespace, item.name = self.translation.namespaced[name]
            self._calls[position] = item
            out.append(self._added(item))
        item.extra.update(call_extras(call))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.text.append(arguments)
            if item.kind == "function_call":
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=item.id,
                        output_index=item.index,
                        delta=arguments,
                    )
                )
        return out

    # ── closing ─────────────────────────────────────────────────────────────

    def settle(self, end: End = CLEAN) -> list[bytes]:
        """Close what is open and decide the status; the terminal follows with `terminal()`.
        After an upstream error or an abort, the items stay as they were (incomplete)."""
        out = self.start()
        if isinstance(end, Clean):
            out += self._close_all()
            out += self._receipt_carrier()
            if self.finish_reason == "length":
                self.status, self.incomplete = "incomplete", {"reason": "max_output_tokens"}
            elif self.finish_reason == "content_filter":
                self.status, self.incomplete = "incomplete", {"reason": "content_filter"}
            else:
                self.status = "completed"
        else:
            self.status = "failed"
            self.error = _error_of(end)
        return out

    def _receipt_carrier(self) -> list[bytes]:
        """A turn with receipts but no reasoning text (Gemini's signatures on its calls) still
        needs an item to carry its token: an empty reasoning item, last, in the same turn."""
        if self.token is None or any(item.kind == "reasoning" for item in self.items):
            return []
        carried = self._receipts or any(item.extra for item in self.items)
        if not carried:
            return []
        item = self._open("reasoning", "rs_")
        out = [self._added(item)]
        item.open = False
        self._current = None
        out.append(
            self._event(
                "response.output_item.done", output_index=item.index, item=self._shape(item)
            )
        )
        return out

    def terminal(self) -> list[bytes]:
        kind = {"completed": "response.completed", "incomplete": "response.incomplete"}
        return [self._event(kind.get(self.status, "response.failed"), response=self.response())]

    def finish(self, end: End = CLEAN) -> list[bytes]:
        return self.settle(end) + self.terminal()

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        return whole(self, completion)

    def turn(self) -> dict[str, Any] | None:
        """The turn the token names, once the response did not fail."""
        if self.token is None or self.status == "failed":
            return None
        return self.assistant_message()

    def _open(self, kind: Any, prefix: str) -> _Item:
        item = _Item(kind, self._item_id(prefix), len(self.items))
        self.items.append(item)
        if kind in ("reasoning", "message"):
            self._current = item
        return item

    def _close_current(self) -> list[bytes]:
        item, self._current = self._current, None
        return self._close(item) if item is not None else []

    def _close_all(self) -> list[bytes]:
        out = self._close_current()
        for item in self.items:
            if item.open:
                out += self._close(item)
        return out

    def _close(self, item: _Item) -> list[bytes]:
        if not item.open:
            return []
        item.open = False
        text = item.joined()
        out: list[bytes] = []
        if item.kind == "reasoning":
            out.append(
                self._event(
                    "response.reasoning_summary_text.done",
                    item_id=item.id,
                    output_index=item.index,
                    summary_index=0,
                    text=text,
                )
            )
            out.append(self._part_event("response.reasoning_summary_part.done", item, text))
        elif item.kind == "message":
            out.append(
                self._event(
                    "response.output_text.done",
                    item_id=item.id,
                    output_index=item.index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
            )
            out.append(self._part_event("response.content_part.done", item, text))
        elif item.kind == "function_call":
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item.id,
                    output_index=item.index,
                    arguments=text,
                )
            )
        else:
            given = _custom_input(text)
            if given:
                out.append(
                    self._event(
                        "response.custom_tool_call_input.delta",
                        item_id=item.id,
                        output_index=item.index,
                        delta=given,
                    )
                )
            out.append(
                self._event(
                    "response.custom_tool_call_input.done",
                    item_id=item.id,
                    output_index=item.index,
                    input=given,
                )
            )
        out.append(
            self._event(
                "response.output_item.done", output_index=item.index, item=self._shape(item)
            )
        )
        return out

    # ── shapes ──────────────────────────────────────────────────────────────

    def _added(self, item: _Item) -> bytes:
        return self._event(
            "response.output_item.added", output_index=item.index, item=self._shape(item)
        )

    def _part_event(self, kind: str, item: _Item, text: str) -> bytes:
        if item.kind == "reasoning":
            return self._event(
                kind,
                item_id=item.id,
                output_index=item.index,
                summary_index=0,
                part={"type": "summary_text", "text": text},
            )
        return self._event(
            kind,
            item_id=item.id,
            output_index=item.index,
            content_index=0,
            part={"type": "output_text", "text": text, "annotations": [], "logprobs": []},
        )

    def _shape(self, item: _Item) -> dict[str, Any]:
        status = "in_progress" if item.open else "completed"
        if item.kind == "reasoning":
            text = "" if item.open else item.joined()
            shaped: dict[str, Any] = {
                "id": item.id,
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": text}] if text else [],
            }
            if self.token is not None:
                shaped["encrypted_content"] = self.token
            return shaped
        if item.kind == "message":
            content = (
                []
                if item.open
                else [
                    {
                        "type": "output_text",
                        "text": item.joined(),
                        "annotations": [],
                        "logprobs": [],
                    }
                ]
            )
            return {
                "id": item.id,
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": content,
            }
        if item.kind == "custom_tool_call":
            return {
                "id": item.id,
                "type": "custom_tool_call",
                "status": status,
                "call_id": item.call_id,
                "name": item.name,
                "input": "" if item.open else _custom_input(item.joined()),
            }
        shaped = {
            "id": item.id,
            "type": "function_call",
            "status": status,
            "arguments": "" if item.open else item.joined(),
            "call_id": item.call_id,
            "name": item.name,
        }
        if item.namespace is not None:
            shaped["namespace"] = item.namespace
        return shaped

    @property
    def output(self) -> list[dict[str, Any]]:
        return [self._shape(item) for item in self.items]

    def response(self) -> dict[str, Any]:
        request = self.request
        terminal = self.status != "in_progress"
        asked = request.get("reasoning")
        reasoning: dict[str, Any] = asked if isinstance(asked, dict) else {}
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": self.status,
            "background": False,
            "error": self.error,
            "incomplete_details": self.incomplete,
            "instructions": request.get("instructions"),
            "max_output_tokens": request.get("max_output_tokens"),
            "model": self.translation.model,
            "output": self.output if terminal else [],
            "parallel_tool_calls": request.get("parallel_tool_calls", True),
            "previous_response_id": request.get("previous_response_id"),
            "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
            "store": self.translation.store,
            "temperature": request.get("temperature", 1.0),
            "text": request.get("text") or {"format": {"type": "text"}},
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": request.get("tools") or [],
            "top_p": request.get("top_p", 1.0),
            "truncation": request.get("truncation", "disabled"),
            "usage": _usage(self.usage) if terminal else None,
            "user": None,
            "metadata": request.get("metadata") or {},
        }

    def assistant_message(self) -> dict[str, Any]:
        """The repaired assistant turn as a chat message, receipts attached: what a follow-up
        sends back (the store's `turn:` and the transcript's last message)."""
        message: dict[str, Any] = {"role": "assistant"}
        texts = [item.joined() for item in self.items if item.kind == "message"]
        message["content"] = "".join(texts) if texts else None
        message.update(self._receipts.fields())
        calls = [item for item in self.items if item.kind in ("function_call", "custom_tool_call")]
        if calls:
            message["tool_calls"] = [
                {
                    "id": item.call_id,
                    "type": "function",
                    "function": {
                        "name": _flat(item),
                        "arguments": item.joined(),
                    },
                    **item.extra,
                }
                for item in calls
            ]
        return message

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _flat(item: _Item) -> str:
    return f"{item.namespace}{NAMESPACE_SEPARATOR}{item.name}" if item.namespace else item.name


def _detail_text(piece: Any) -> str:
    """The readable text of one `reasoning_details` piece (OpenRouter): a `reasoning.text`'s
    text or a `reasoning.summary`'s summary; encrypted pieces have none."""
    if not isinstance(piece, dict):
        return ""
    for name in ("text", "summary"):
        if isinstance(piece.get(name), str):
            return str(piece[name])
    return ""


def _custom_input(arguments: str) -> str:
    """A custom tool's input from the one-string-argument function it was offered as; the
    arguments as sent when they are not that object (a model that ignored the schema)."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get(CUSTOM_INPUT), str):
        return str(parsed[CUSTOM_INPUT])
    return arguments


def _usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """Chat usage -> Responses usage, complete (Codex fails a turn without `total_tokens`)."""
    if usage is None:
        return None
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": _int(prompt_details.get("cached_tokens"))},
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": _int(completion_details.get("reasoning_tokens"))
        },
        "total_tokens": _int(usage.get("total_tokens")) or prompt + completion,
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _error_of(end: End) -> dict[str, Any]:
    if isinstance(end, Aborted):
        body: dict[str, Any] = {"message": end.message, "code": end.code}
    else:
        body = end.body if isinstance(end, UpstreamError) and isinstance(end.body, dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    code = inner.get("code") if isinstance(inner, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    return {
        "code": str(code) if code not in (None, "") else "server_error",
        "message": str(message) if message else "the upstream stream failed",
    }


def whole(events: ResponsesEvents, completion: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed chat completion -> the Responses response object, through the same
    state machine as a stream (one chunk carrying the whole message, its finish and usage)."""
    events.feed(completion_chunk(completion))
    events.finish(CLEAN)
    return events.response()


def completion_chunk(completion: dict[str, Any]) -> Chunk:
    """A whole chat completion as the one chunk that says all of it."""
    return {
        "choices": [
            {
                "index": choice.get("index", 0),
                "delta": _as_delta(choice.get("message") or {}),
                "finish_reason": choice.get("finish_reason"),
            }
            for choice in completion.get("choices") or ()
            if isinstance(choice, dict)
        ],
        "usage": completion.get("usage"),
    }


def _as_delta(message: dict[str, Any]) -> dict[str, Any]:
    delta = dict(message)
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [
            {**call, "index": position}
            for position, call in enumerate(calls)
            if isinstance(call, dict)
        ]
    return delta
