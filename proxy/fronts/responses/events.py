"""Repaired chat chunks -> Responses events, in the order real clients require.

Fed one repaired chat-completion chunk at a time (`feed`), then told how the stream ended
(`settle` closes the items, `terminal` says how the response ended; `finish` is both). Pure:
no I/O. Between `settle` and `terminal` the caller writes what `turn()` and `output` hold to
the store: clients fire their next request the moment the terminal arrives. The interface is
every front's (fronts/translator.py).

The sequence (RESPONSES.md §1, from OpenAI's own captures): `response.created`,
`response.in_progress`, the output items in output order (`output_index` dense), each with its
kind's events (output_items.py, written by item_events.py), then exactly one terminal event
(response_object.py). `sequence_number` rises from 0. Late usage (a chunk after the finish) is
waited for: the terminal goes out at the end.

Only one item is open at a time, but for calls: chat streams parallel calls by `index`, and a
call's arguments may continue after another started, so every call stays open until something
else starts or the stream ends. Text after calls is a new message item (kept, not dropped).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from proxy.fronts.responses.item_events import EventWriter
from proxy.fronts.responses.output_items import (
    CUSTOM_TOOL_CALL,
    FUNCTION_CALL,
    MESSAGE,
    REASONING,
    Item,
    ItemKind,
    assistant_message,
    detail_text,
)
from proxy.fronts.responses.response_object import (
    error_of,
    incomplete_reason,
    response_object,
    terminal_event,
)
from proxy.fronts.responses.translation import Translation
from proxy.fronts.responses.whole import completion_chunk
from proxy.fronts.translator import CLEAN, Aborted, Clean, End, UpstreamError
from proxy.fronts.turns import TurnReceipts, call_extras

__all__ = [
    "CLEAN",
    "End",
    "ResponsesEvents",
    "aborted",
    "completion_chunk",
    "new_id",
    "upstream_error",
    "whole",
]

Chunk = dict[str, Any]


def upstream_error(body: dict[str, Any]) -> End:
    return UpstreamError(body)


def aborted(message: str, code: str = "stream_aborted") -> End:
    return Aborted(message, code)


def whole(events: ResponsesEvents, completion: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed chat completion -> the Responses response object, through the same
    state machine as a stream (one chunk carrying the whole message, its finish and usage)."""
    events.feed(completion_chunk(completion))
    events.finish(CLEAN)
    return events.response()


def new_id(prefix: str) -> str:
    return prefix + os.urandom(12).hex()


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
        self.completed_at: int | None = None
        """When the answer ended completed (the spec's `completed_at`; null otherwise)."""
        self.items: list[Item] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.status = "in_progress"
        self.error: dict[str, Any] | None = None
        self.incomplete: dict[str, Any] | None = None
        self._writer = EventWriter()
        self._event = self._writer.event
        self._calls: dict[int, Item] = {}
        self._current: Item | None = None  # the open reasoning or message item
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
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
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
                out += self._say(REASONING, value)
            elif name == "reasoning_details" and isinstance(value, list) and not spoken:
                # OpenRouter also says it as `reasoning`: shown once
                out += self._say(REASONING, "".join(detail_text(piece) for piece in value))
        for text in (delta.get("content"), delta.get("refusal")):
            if isinstance(text, str) and text:
                out += self._say(MESSAGE, text)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    out += self._call(call)
        return out

    def _say(self, kind: ItemKind, text: str) -> list[bytes]:
        """Reasoning or message text: onto the open item of its kind, or a new one after
        everything open is closed."""
        if not text:
            return []
        out: list[bytes] = []
        item = self._current
        if item is None or item.kind is not kind:
            out += self._close_all()
            item = self._open(kind)
            out += self._writer.opened(item, self.token)
        item.text.append(text)
        out.append(self._writer.delta(item, text))
        return out

    def _call(self, call: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        position = call.get("index")
        position = position if isinstance(position, int) else len(self._calls)
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        item = self._calls.get(position)
        if item is None or not item.open:
            out += self._close_current()
            name = function.get("name")
            name = name if isinstance(name, str) else ""
            custom = name in self.translation.custom_tools
            item = self._open(CUSTOM_TOOL_CALL if custom else FUNCTION_CALL)
            item.chat_index = position
            call_id = call.get("id")
            item.call_id = call_id if isinstance(call_id, str) and call_id else new_id("call_")
            item.name, item.namespace = name, None
            if name in self.translation.namespaced:
                item.namespace, item.name = self.translation.namespaced[name]
            self._calls[position] = item
            out += self._writer.opened(item, self.token)
        item.extra.update(call_extras(call))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.text.append(arguments)
            if item.kind.streams:
                out.append(self._writer.delta(item, arguments))
        return out

    # ── closing ─────────────────────────────────────────────────────────────

    def settle(self, end: End = CLEAN) -> list[bytes]:
        """Close what is open and decide the status; the terminal follows with `terminal()`.
        After an upstream error or an abort, the items stay as they were (incomplete)."""
        out = self.start()
        if isinstance(end, Clean):
            out += self._close_all()
            out += self._receipt_carrier()
            reason = incomplete_reason(self.finish_reason)
            if reason is not None:
                self.status, self.incomplete = "incomplete", {"reason": reason}
            else:
                self.status = "completed"
                self.completed_at = max(self.created_at, int(time.time()))
        else:
            self.status = "failed"
            self.error = error_of(end)
        return out

    def _receipt_carrier(self) -> list[bytes]:
        """A turn with receipts but no reasoning text (Gemini's signatures on its calls) still
        needs an item to carry its token: an empty reasoning item, last, in the same turn."""
        if self.token is None or any(item.kind is REASONING for item in self.items):
            return []
        carried = self._receipts or any(item.extra for item in self.items)
        if not carried:
            return []
        item = self._open(REASONING)
        out = [self._writer.added(item, self.token)]
        item.open = False
        self._current = None
        out.append(self._writer.item_done(item, self.token))
        return out

    def terminal(self) -> list[bytes]:
        return [self._event(terminal_event(self.status), response=self.response())]

    def finish(self, end: End = CLEAN) -> list[bytes]:
        return self.settle(end) + self.terminal()

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        return whole(self, completion)

    def turn(self) -> dict[str, Any] | None:
        """The turn the token names, once the response did not fail."""
        if self.token is None or self.status == "failed":
            return None
        return self.assistant_message()

    def _open(self, kind: ItemKind) -> Item:
        item = Item(kind, self._item_id(kind.prefix), len(self.items))
        self.items.append(item)
        if not kind.call:
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

    def _close(self, item: Item) -> list[bytes]:
        if not item.open:
            return []
        item.open = False
        return self._writer.closed(item, self.token)

    # ── what the response says ─────────────────────────────────────────────

    @property
    def output(self) -> list[dict[str, Any]]:
        return [item.kind.shape(item, self.token) for item in self.items]

    def response(self) -> dict[str, Any]:
        ended = self.status != "in_progress"  # output and usage only once it ended
        return response_object(
            self.request,
            response_id=self.id,
            created_at=self.created_at,
            completed_at=self.completed_at,
            status=self.status,
            error=self.error,
            incomplete=self.incomplete,
            model=self.translation.model,
            store=self.translation.store,
            output=self.output if ended else [],
            usage=self.usage if ended else None,
        )

    def assistant_message(self) -> dict[str, Any]:
        """The repaired assistant turn as a chat message, receipts attached: what a follow-up
        sends back (the store's `turn:` and the transcript's last message)."""
        return assistant_message(self.items, self._receipts.fields())
