"""Repaired chat chunks -> Anthropic Messages events (phase 2's output, for Messages clients).

Pure: fed the repaired chunks one at a time, told how the stream ended, it returns encoded SSE
events. What Anthropic's own clients rely on (shared/MESSAGES.md), held here by construction:

- one `message_start` first, one `message_delta` and one `message_stop` last on a clean end;
- blocks one after another, never interleaved: indexes count up from 0, each started once, its
  deltas fit its type, and it is stopped before the next starts and before `message_delta`;
- a `tool_use` block's `partial_json` is one JSON object: calls are held until the choice's
  finish (ToolCallRepair sends them whole there anyway by default) and each goes out as one
  block with its whole input, so calls an upstream interleaved never interleave here;
- `stop_reason` from the repaired finish: `tool_use` whenever a call went out, `max_tokens` for
  `length`, `stop_sequence` when the upstream named which one matched (vLLM's `stop_reason`),
  `refusal` for `content_filter`, else `end_turn`;
- an upstream failure, in band or a broken-off stream, is an `error` event and nothing after it:
  no invented `end_turn` that would make a cut answer look whole.

Reasoning (`reasoning_content`, `reasoning`, `reasoning_details`) becomes a `thinking` block
whose `signature` is a receipt token (proxy/fronts/receipt_tokens.py) bound to the tenant and
this message: the AI SDK drops an unsigned thinking block, and the request side drops (and
counts) a signature this proxy did not issue to this tenant.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.fronts.messages.anthropic_errors import error_body
from proxy.fronts.translator import Aborted, Clean, End, UpstreamError
from proxy.fronts.turns import TurnReceipts, call_extras, turn_key
from proxy.wire import json_codec

__all__ = ["Aborted", "Clean", "End", "MessageEvents", "UpstreamError", "events_of", "whole"]

Mint = Callable[[str], str]
"""A receipt key -> the signature token for it (receipt_tokens.mint bound to the scope)."""


def new_message_id() -> str:
    return "msg_" + os.urandom(12).hex()


def sse(event: dict[str, Any]) -> bytes:
    """One named event, as Anthropic frames them (`event:` line, then its JSON)."""
    name: str = event["type"]
    return b"event: " + name.encode() + b"\ndata: " + json_codec.dumps(event) + b"\n\n"


PING = sse({"type": "ping"})


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields beside id, type and function (Gemini's signature), for the kept turn."""


def reasoning_text(delta: dict[str, Any]) -> str | None:
    """The reasoning a delta carries, or None. OpenRouter sends the same text in `reasoning`
    and `reasoning_details`: one field is read, in this order, never two."""
    for name in ("reasoning_content", "reasoning"):
        value = delta.get(name)
        if isinstance(value, str) and value:
            return value
    details = delta.get("reasoning_details")
    if isinstance(details, list) and details:
        pieces = []
        for detail in details:
            if isinstance(detail, dict):
                for name in ("text", "summary"):
                    if isinstance(detail.get(name), str):
                        pieces.append(detail[name])
        return "".join(pieces)  # "" for encrypted-only details: a block still carries them
    return None


def stop_reason(finish: Any, called: bool, matched: Any, stops: list[str]) -> tuple[str, Any]:
    """(stop_reason, stop_sequence) for a chat finish."""
    if called:
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    if finish == "content_filter":
        return "refusal", None
    if isinstance(matched, str) and matched in stops:
        return "stop_sequence", matched
    return "end_turn", None


def usage_of(usage: Any) -> dict[str, int]:
    """Anthropic's usage from a chat usage object (zeros where the upstream said nothing)."""
    out = {"input_tokens": 0, "output_tokens": 0}
    if not isinstance(usage, dict):
        return out
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    cached = cached if isinstance(cached, int) else 0
    if isinstance(prompt, int):
        out["input_tokens"] = max(prompt - cached, 0)
    if isinstance(completion, int):
        out["output_tokens"] = completion
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


def error_message(body: Any) -> str:
    """The upstream's own words for its error, whatever its shape."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(body.get("message"), str):
            return str(body["message"])
    if isinstance(body, str) and body:
        return body
    return "the upstream reported an error"


class MessageEvents:
    """One streamed answer's Messages events. Only the first choice is read: Messages has no
    `n`, and the front never asks for more than one. Besides the events it builds the repaired
    assistant chat message (`turn()`), which the signature's token names once it is kept."""

    def __init__(
        self,
        model: str,
        *,
        message_id: str | None = None,
        mint: Mint | None = None,
        stop_sequences: list[str] | None = None,
    ) -> None:
        self.model = model
        self.message_id = message_id or new_message_id()
        self._mint = mint
        self._stops = stop_sequences or []
        self._started = False
        self._next_index = 0
        self._open: str | None = None  # the type of the block now open
        self._calls: dict[int, _Call] = {}
        self._called = False
        self._finish: Any = None
        self._matched: Any = None
        self._usage: Any = None
        self.counts: dict[str, int] = {}
        self._signed = False  # a thinking block went out with a token naming this turn
        self._clean = False
        self._texts: list[str] = []
        self._receipts = TurnReceipts()
        self._turn_calls: list[dict[str, Any]] = []
        self._whole: dict[str, Any] | None = None  # a whole answer's chat message
        self._end: End = Clean()

    @property
    def answer_id(self) -> str:
        return self.message_id

    def _count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def start(self) -> list[bytes]:
        """`message_start`, once: fed chunks and pings send it first when it has not gone."""
        if self._started:
            return []
        self._started = True
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [sse({"type": "message_start", "message": message})]

    def ping(self) -> list[bytes]:
        return [*self.start(), PING]

    def heartbeat(self) -> list[bytes]:
        return self.ping()

    def feed(self, chunk: dict[str, Any]) -> list[bytes]:
        out = self.start()
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            return out
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self._receipts.feed(delta)
            thought = reasoning_text(delta)
            if thought is not None:
                out += self._block("thinking", {"thinking": "", "signature": ""})
                if thought:
                    out.append(self._delta({"type": "thinking_delta", "thinking": thought}))
            text = delta.get("content")
            if isinstance(text, str) and text:
                self._texts.append(text)
                out += self._block("text", {"text": ""})
                out.append(self._delta({"type": "text_delta", "text": text}))
            for entry in delta.get("tool_calls") or ():
                if isinstance(entry, dict):
                    self._take_call(entry)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
            self._matched = choice.get("stop_reason")
            out += self._flush_calls()
        return out

    def _take_call(self, entry: dict[str, Any]) -> None:
        index = entry.get("index", len(self._calls))
        call = self._calls.setdefault(index if isinstance(index, int) else 0, _Call())
        if isinstance(entry.get("id"), str):
            call.id = entry["id"]
        function = entry.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"]:
                call.name = function["name"]
            if isinstance(function.get("arguments"), str):
                call.arguments.append(function["arguments"])
        call.extra.update(call_extras(entry))

    def _flush_calls(self) -> list[bytes]:
        out: list[bytes] = []
        for position in sorted(self._calls):
            call = self._calls[position]
            if not call.name:
                self._count("tool_call_without_name_dropped")  # ToolCallRepair names them all
                continue
            arguments = "".join(call.arguments).strip() or "{}"
            try:
                parsed = json_codec.loads(arguments)
            except json_codec.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                self._count("tool_input_not_an_object")
                arguments = "{}"
            block = {"id": call.id or f"toolu_{os.urandom(12).hex()}", "name": call.name}
            function = {"name": call.name, "arguments": arguments}
            self._turn_calls.append(
                {"id": block["id"], "type": "function", "function": function, **call.extra}
            )
            out += self._close()
            out += self._block("tool_use", {**block, "input": {}})
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
            out += self._close()
            self._called = True
        self._calls.clear()
        return out

    def _block(self, kind: str, fields: dict[str, Any]) -> list[bytes]:
        """Start a block of `kind` unless one is open: the one open is stopped first."""
        if self._open == kind:
            return []
        out = self._close()
        self._open = kind
        block = {"type": kind, **fields}
        return [
            *out,
            sse({"type": "content_block_start", "index": self._next_index, "content_block": block}),
        ]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse({"type": "content_block_delta", "index": self._next_index, "delta": delta})

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        out = []
        if self._open == "thinking":
            signature = self._mint(turn_key(self.message_id)) if self._mint else ""
            self._signed = self._signed or bool(signature)
            out.append(self._delta({"type": "signature_delta", "signature": signature}))
        out.append(sse({"type": "content_block_stop", "index": self._next_index}))
        self._open = None
        self._next_index += 1
        return out

    def finish(self, end: End) -> list[bytes]:
        return self.settle(end) + self.terminal()

    def settle(self, end: End) -> list[bytes]:
        """The blocks closed after a clean end; after a failure, what went out stays as it is
        and the terminal is the `error` event: nothing is invented after the failure."""
        out = self.start()
        self._end = end
        if not isinstance(end, Clean):
            return out
        self._clean = True
        out += self._flush_calls()  # calls with no finish chunk after them
        out += self._close()
        return out

    def terminal(self) -> list[bytes]:
        end = self._end
        if isinstance(end, UpstreamError | Aborted):
            message = end.message if isinstance(end, Aborted) else error_message(end.body)
            status = 500 if isinstance(end, Aborted) else 502
            return [sse(error_body(status, message))]
        reason, sequence = stop_reason(self._finish, self._called, self._matched, self._stops)
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        usage = usage_of(self._usage)
        return [
            sse({"type": "message_delta", "delta": delta, "usage": usage}),
            sse({"type": "message_stop"}),
        ]

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        message = whole(
            completion,
            self.model,
            message_id=self.message_id,
            mint=self._mint,
            stop_sequences=self._stops,
        )
        signed = any(b["type"] == "thinking" and b["signature"] for b in message["content"])
        choices = completion.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        chat = choice.get("message") if isinstance(choice, dict) else None
        if signed and isinstance(chat, dict):
            self._whole = {**chat, "role": "assistant"}
        return message

    def turn(self) -> dict[str, Any] | None:
        """The repaired assistant message the thinking signature names; None when no thinking
        block was signed or the stream failed."""
        if self._whole is not None:
            return self._whole
        if not (self._signed and self._clean):
            return None
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._texts) or None}
        message.update(self._receipts.fields())
        if self._turn_calls:
            message["tool_calls"] = self._turn_calls
        return message


def whole(
    completion: dict[str, Any],
    model: str,
    *,
    message_id: str | None = None,
    mint: Mint | None = None,
    stop_sequences: list[str] | None = None,
) -> dict[str, Any]:
    """A non-streamed chat completion (repaired) as a Messages `message` object."""
    message_id = message_id or new_message_id()
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    choice = choice if isinstance(choice, dict) else {}
    chat = choice.get("message")
    chat = chat if isinstance(chat, dict) else {}
    content: list[dict[str, Any]] = []
    thought = reasoning_text(chat)
    if thought is not None:
        signature = mint(turn_key(message_id)) if mint else ""
        content.append({"type": "thinking", "thinking": thought, "signature": signature})
    text = chat.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    called = False
    for call in chat.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not function.get("name"):
            continue
        try:
            arguments = json_codec.loads(function.get("arguments") or "{}")
        except json_codec.JSONDecodeError:
            arguments = None
        call_id = call.get("id") if isinstance(call.get("id"), str) else None
        content.append(
            {
                "type": "tool_use",
                "id": call_id or f"toolu_{os.urandom(12).hex()}",
                "name": function["name"],
                "input": arguments if isinstance(arguments, dict) else {},
            }
        )
        called = True
    reason, sequence = stop_reason(
        choice.get("finish_reason"), called, choice.get("stop_reason"), stop_sequences or []
    )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_of(completion.get("usage")),
    }


def events_of(message: dict[str, Any]) -> list[bytes]:
    """A whole `message` as the events a stream of it would have been: for a client that asked
    to stream from an upstream that answered in one body."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 0}
    out = [sse({"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        else:
            opening = {**block, "input": {}}
            partial = json_codec.dumps(block["input"]).decode()
            deltas = [{"type": "input_json_delta", "partial_json": partial}]
        out.append(sse({"type": "content_block_start", "index": index, "content_block": opening}))
        for delta in deltas:
            out.append(sse({"type": "content_block_delta", "index": index, "delta": delta}))
        out.append(sse({"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    out.append(sse({"type": "message_delta", "delta": stop, "usage": message["usage"]}))
    out.append(sse({"type": "message_stop"}))
    return out
