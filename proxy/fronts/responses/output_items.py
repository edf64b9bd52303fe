"""The output items of a Responses answer, by kind, as data.

Every kind streams the same way (RESPONSES.md §1): `output_item.added` before any delta, for
text kinds a part opened (`content_part.added`, `reasoning_summary_part.added`), its deltas
(`output_text.delta`, `reasoning_summary_text.delta`, `function_call_arguments.delta`,
`custom_tool_call_input.delta`), its `.done` event with the whole value, the part closed,
`output_item.done` after the last. Deltas name the item id (never the call id), and the ids in
`done` and in the terminal response are the ones in `added`.
What differs is data, held in one `ItemKind` per kind: the id prefix, the delta and done event
names, where the text sits (`summary_index` or `content_index`), the done field's name, and
the item's shape in `output`. A custom tool's input is the one exception in how: it was offered
as a function of one string argument, so it goes out whole at the close, read back out of that
object (`streams=False`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.fronts.responses.translation import CUSTOM_INPUT, NAMESPACE_SEPARATOR
from proxy.wire import json_codec

Shaped = dict[str, Any]


@dataclass
class Item:
    """One output item as it grows from the chat deltas."""

    kind: ItemKind
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

    def flat_name(self) -> str:
        """The name the chat upstream knew the call by (a namespace's member flattened)."""
        if self.namespace:
            return f"{self.namespace}{NAMESPACE_SEPARATOR}{self.name}"
        return self.name


@dataclass(frozen=True, slots=True)
class Part:
    """A text kind's one part: its events' names and its shape, given the text."""

    added: str
    done: str
    shape: Callable[[str], Shaped]


@dataclass(frozen=True, slots=True)
class ItemKind:
    """What one kind of output item says, and where, in its events and in `output`."""

    type: str
    prefix: str
    """Its id's prefix (`rs_`, `msg_`, `fc_`, `ctc_`)."""
    delta_event: str
    done_event: str
    done_field: str
    """The done event's field holding the whole value (`text`, `arguments`, `input`)."""
    shape: Callable[[Item, str | None], Shaped]
    """The item in `output` (and in `output_item.added` / `.done`), given the receipt token."""
    place: dict[str, int] = field(default_factory=dict)
    """Where the text sits in its item: `summary_index` or `content_index`, named in every
    event but `output_item.*`."""
    trailer: dict[str, Any] = field(default_factory=dict)
    """Fields after the text in its delta and done events (`logprobs` for message text)."""
    part: Part | None = None
    """The part a text kind opens before its first delta and closes after its done event."""
    streams: bool = True
    """Deltas as they arrive; False: one delta of the final value at the close."""
    final: Callable[[str], str] = str
    """The done value from the joined chat text."""
    call: bool = False


def assistant_message(items: list[Item], receipts: dict[str, Any]) -> dict[str, Any]:
    """The items as the chat assistant message they stand for: the messages' text, the
    receipts beside it, the calls under the names the upstream knew them by."""
    message: dict[str, Any] = {"role": "assistant"}
    texts = [item.joined() for item in items if item.kind is MESSAGE]
    message["content"] = "".join(texts) if texts else None
    message.update(receipts)
    calls = [item for item in items if item.kind.call]
    if calls:
        message["tool_calls"] = [
            {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.flat_name(), "arguments": item.joined()},
                **item.extra,
            }
            for item in calls
        ]
    return message


def summary_part(text: str) -> Shaped:
    return {"type": "summary_text", "text": text}


def text_part(text: str) -> Shaped:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def detail_text(piece: Any) -> str:
    """The readable text of one `reasoning_details` piece (OpenRouter): a `reasoning.text`'s
    text or a `reasoning.summary`'s summary; encrypted pieces have none."""
    if not isinstance(piece, dict):
        return ""
    for name in ("text", "summary"):
        if isinstance(piece.get(name), str):
            return str(piece[name])
    return ""


def custom_input(arguments: str) -> str:
    """A custom tool's input from the one-string-argument function it was offered as; the
    arguments as sent when they are not that object (a model that ignored the schema)."""
    try:
        parsed = json_codec.loads(arguments)
    except json_codec.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get(CUSTOM_INPUT), str):
        return str(parsed[CUSTOM_INPUT])
    return arguments


def _status(item: Item) -> str:
    return "in_progress" if item.open else "completed"


def _reasoning(item: Item, token: str | None) -> Shaped:
    text = "" if item.open else item.joined()
    shaped: Shaped = {
        "id": item.id,
        "type": "reasoning",
        "summary": [summary_part(text)] if text else [],
    }
    if token is not None:
        shaped["encrypted_content"] = token
    return shaped


def _message(item: Item, token: str | None) -> Shaped:
    return {
        "id": item.id,
        "type": "message",
        "status": _status(item),
        "role": "assistant",
        "content": [] if item.open else [text_part(item.joined())],
    }


def _function_call(item: Item, token: str | None) -> Shaped:
    shaped: Shaped = {
        "id": item.id,
        "type": "function_call",
        "status": _status(item),
        "arguments": "" if item.open else item.joined(),
        "call_id": item.call_id,
        "name": item.name,
    }
    if item.namespace is not None:
        shaped["namespace"] = item.namespace
    return shaped


def _custom_tool_call(item: Item, token: str | None) -> Shaped:
    return {
        "id": item.id,
        "type": "custom_tool_call",
        "status": _status(item),
        "call_id": item.call_id,
        "name": item.name,
        "input": "" if item.open else custom_input(item.joined()),
    }


REASONING = ItemKind(
    "reasoning",
    "rs_",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "text",
    _reasoning,
    place={"summary_index": 0},
    part=Part(
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        summary_part,
    ),
)
MESSAGE = ItemKind(
    "message",
    "msg_",
    "response.output_text.delta",
    "response.output_text.done",
    "text",
    _message,
    place={"content_index": 0},
    trailer={"logprobs": []},
    part=Part("response.content_part.added", "response.content_part.done", text_part),
)
FUNCTION_CALL = ItemKind(
    "function_call",
    "fc_",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "arguments",
    _function_call,
    call=True,
)
CUSTOM_TOOL_CALL = ItemKind(
    "custom_tool_call",
    "ctc_",
    "response.custom_tool_call_input.delta",
    "response.custom_tool_call_input.done",
    "input",
    _custom_tool_call,
    streams=False,
    final=custom_input,
    call=True,
)
