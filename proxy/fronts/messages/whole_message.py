"""A whole answer both ways: a non-streamed chat completion (repaired) as a Messages `message`
object, and a `message` as the events a stream of it would have been (for a client that asked
to stream from an upstream that answered in one body)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.fronts.messages.chat_answer import reasoning_text, stop_reason, usage_of
from proxy.fronts.messages.framing import (
    block_delta,
    block_start,
    block_stop,
    message_end,
    new_message_id,
    sse,
)
from proxy.fronts.messages.held_calls import ENCODED_KIND, input_object, tool_use_id
from proxy.fronts.messages.tool_use_ids import client_id
from proxy.fronts.turns import turn_key
from proxy.wire import json_codec

Mint = Callable[[str], str]
"""A receipt key -> the signature token for it (receipt_tokens.mint bound to the scope)."""
ESTIMATED_KIND = "messages_input_tokens_estimated"
"""The upstream reported no prompt: the client's `input_tokens` is the proxy's estimate."""


def _uncounted(kind: str) -> None:
    """No tally to count on (a caller that only renders)."""


def whole(
    completion: dict[str, Any],
    model: str,
    *,
    message_id: str | None = None,
    mint: Mint | None = None,
    stop_sequences: list[str] | None = None,
    input_estimate: int = 0,
    count: Callable[[str], None] = _uncounted,
) -> dict[str, Any]:
    """A non-streamed chat completion (repaired) as a Messages `message` object. Its usage
    has `input_tokens` as the upstream reported them, else `input_estimate` (counted: the
    client's count is then the proxy's)."""
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
    calls = chat.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        name, given = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not name:
            continue
        arguments = input_object(given) if isinstance(given, str) and given else None
        call_id = tool_use_id(call.get("id") if isinstance(call.get("id"), str) else None)
        block_id = client_id(call_id)
        if block_id != call_id:
            count(ENCODED_KIND)
        content.append(
            {
                "type": "tool_use",
                "id": block_id,
                "name": name,
                "input": arguments if arguments is not None else {},
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
        "usage": whole_usage(completion.get("usage"), input_estimate, count),
    }


def whole_usage(usage: Any, input_estimate: int, count: Callable[[str], None]) -> dict[str, int]:
    """A whole message's usage: `input_tokens` is required there, so when the upstream
    reported no prompt it is the estimate, and counted."""
    out = usage_of(usage)
    if "input_tokens" not in out:
        if input_estimate:
            count(ESTIMATED_KIND)
        out = {"input_tokens": input_estimate, **out}
    return out


def events_of(message: dict[str, Any]) -> list[bytes]:
    """A whole `message` as the events a stream of it would have been: for a client that asked
    to stream from an upstream that answered in one body."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**message["usage"], "output_tokens": 0}
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
        out.append(block_start(index, opening))
        for delta in deltas:
            out.append(block_delta(index, delta))
        out.append(block_stop(index))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    return out + message_end(stop, message["usage"])
