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
  no invented `end_turn` that would make a cut answer look whole;
- a `tool_use` id is in Anthropic's alphabet (tool_use_ids.py), the kept turn holding the
  upstream's own;
- `message_start`'s `input_tokens` is the prompt's estimate (never 0 for a request), and
  `message_delta` carries what the upstream reported (chat_answer.py `usage_of`), leaving
  `input_tokens` out when it reported no prompt, so the estimate stands.

Reasoning (`reasoning_content`, `reasoning`, `reasoning_details`) becomes a `thinking` block
whose `signature` is a receipt token (proxy/fronts/receipt_tokens.py) bound to the tenant and
this message: the AI SDK drops an unsigned thinking block, and the request side drops (and
counts) a signature this proxy did not issue to this tenant.

Here: the stream's state (which block is open, its index, the finish, the kept turn). The
framing of each event is framing.py's, the calls held until the finish held_calls.py's, what
the chat answer says in Messages' terms chat_answer.py's, a whole answer whole_message.py's.
The names this module offered before are importable from it.
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.messages.anthropic_errors import error_body
from proxy.fronts.messages.chat_answer import (
    error_message,
    reasoning_text,
    stop_reason,
    usage_of,
)
from proxy.fronts.messages.framing import (
    PING,
    block_delta,
    block_start,
    block_stop,
    message_end,
    new_message_id,
    sse,
)
from proxy.fronts.messages.held_calls import HeldCalls
from proxy.fronts.messages.whole_message import ESTIMATED_KIND, Mint, events_of, whole
from proxy.fronts.translator import Aborted, Clean, End, UpstreamError
from proxy.fronts.turns import TurnReceipts, turn_key

__all__ = [
    "PING",
    "Aborted",
    "Clean",
    "End",
    "MessageEvents",
    "Mint",
    "UpstreamError",
    "error_message",
    "events_of",
    "new_message_id",
    "reasoning_text",
    "sse",
    "stop_reason",
    "usage_of",
    "whole",
]


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
        input_estimate: int = 0,
    ) -> None:
        self.model = model
        self.input_estimate = input_estimate
        """`message_start`'s `input_tokens`: the proxy's estimate of the prompt, made before
        the upstream says (learning/token_ratios.py); `message_delta` carries its count."""
        self.message_id = message_id or new_message_id()
        self._mint = mint
        self._stops = stop_sequences or []
        self._started = False
        self._next_index = 0
        self._open: str | None = None  # the type of the block now open
        self._calls = HeldCalls()
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
            "usage": {"input_tokens": self.input_estimate, "output_tokens": 0},
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
        if isinstance(choice.get("usage"), dict) and not chunk.get("usage"):
            self._usage = choice["usage"]  # Moonshot streams it inside the finishing choice
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
            calls = delta.get("tool_calls")
            for entry in calls if isinstance(calls, list) else ():
                if isinstance(entry, dict):
                    self._calls.take(entry)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
            self._matched = choice.get("stop_reason")
            out += self._flush_calls()
        return out

    def _flush_calls(self) -> list[bytes]:
        """Each held call as one whole `tool_use` block."""
        out: list[bytes] = []
        for call in self._calls.flush(self._count):
            self._turn_calls.append(call.chat_call)
            out += self._close()
            out += self._block("tool_use", {**call.block, "input": {}})
            out.append(self._delta({"type": "input_json_delta", "partial_json": call.arguments}))
            out += self._close()
            self._called = True
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
            block_start(self._next_index, block),
        ]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return block_delta(self._next_index, delta)

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        out = []
        if self._open == "thinking":
            signature = self._mint(turn_key(self.message_id)) if self._mint else ""
            self._signed = self._signed or bool(signature)
            out.append(self._delta({"type": "signature_delta", "signature": signature}))
        out.append(block_stop(self._next_index))
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
        if "input_tokens" not in usage and self.input_estimate:
            # No prompt reported: the count message_start gave stands (the SDKs keep a
            # field message_delta leaves out), and the client's count is the estimate.
            self._count(ESTIMATED_KIND)
        return message_end(delta, usage)

    def whole(self, completion: dict[str, Any]) -> dict[str, Any]:
        message = whole(
            completion,
            self.model,
            message_id=self.message_id,
            mint=self._mint,
            stop_sequences=self._stops,
            input_estimate=self.input_estimate,
            count=self._count,
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
