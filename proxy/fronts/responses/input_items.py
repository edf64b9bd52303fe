"""A Responses request's `input` items -> chat messages.

A string is one user message. Items, by kind: a `message` (with or without `type`; roles
user, system, developer, assistant; `developer` sent as `system`, which chat upstreams other
than OpenAI's reject or ignore); a run of assistant-side items (assistant `message`,
`function_call`, `custom_tool_call`, `reasoning`) folded into one assistant chat message, its
calls' ids the `call_id`s; each `*_call_output` a `tool` message; a reasoning item's
`encrypted_content` a receipt token, read back into the receipts of the assistant message of
its run; an `item_reference` looked up in the store; Codex's `compaction_trigger` (last, once)
marks a compaction turn, and a `compaction` item it sends back becomes its summary
(compaction.py).
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.quoted import quoted
from proxy.fronts.receipt_tokens import read as read_token
from proxy.fronts.responses.compaction import ITEM, RESTORED_KIND, TRIGGER, summary_message
from proxy.fronts.responses.input_content import chat_content, joined_text, json_text, output_text
from proxy.fronts.responses.openai_errors import FrontError, invalid
from proxy.fronts.responses.translation import (
    CUSTOM_INPUT,
    NAMESPACE_SEPARATOR,
    Item,
    Lookups,
    Message,
    Translation,
)
from proxy.fronts.turns import restore_turns

ASSISTANT_SIDE = frozenset({"function_call", "custom_tool_call", "reasoning"})
CALL_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


class _Folder:
    """Builds chat messages from items, folding each assistant-side run into one message."""

    def __init__(self, lookups: Lookups, translation: Translation) -> None:
        self.lookups = lookups
        self.translation = translation
        self.messages: list[Message] = []
        self.assistant: Message | None = None
        self.receipts: list[tuple[Message, str]] = []
        """(assistant message, receipt key) for each valid token: restored at the end."""
        self.summaries: list[tuple[Message, str, str]] = []
        """(summary message, store key, where) for each compaction item: filled at the end."""

    def open_assistant(self) -> Message:
        if self.assistant is None:
            self.assistant = {"role": "assistant", "content": None}
            self.messages.append(self.assistant)
        return self.assistant

    def close_assistant(self) -> None:
        self.assistant = None

    def add(self, item: Item, where: str) -> None:
        kind = item.get("type")
        if kind is not None and not isinstance(kind, str):
            raise invalid(f"{where}.type", "must be a string")
        if kind is None or kind == "message":
            self._message(item, where)
        elif kind in ("function_call", "custom_tool_call"):
            self._call(item, where)
        elif kind in CALL_OUTPUTS:
            self.close_assistant()
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise invalid(f"{where}.call_id", "required")
            self.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": output_text(item.get("output")),
                }
            )
        elif kind == "reasoning":
            self._reasoning(item)
        elif kind == ITEM:
            self._compaction(item, where)
        else:
            raise invalid(f"{where}.type", f"input items of type {quoted(kind)} are not supported")

    def _message(self, item: Item, where: str) -> None:
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise invalid(f"{where}.role", f"unknown role {quoted(role)}")
        content = chat_content(item.get("content"), where, self.translation.files)
        if role == "assistant":
            message = self.open_assistant()
            text = content if isinstance(content, str) else joined_text(content)
            message["content"] = (message["content"] or "") + text
            return
        self.close_assistant()
        if role == "developer":
            role = "system"
            self.translation.count("responses_developer_role")
        self.messages.append({"role": role, "content": content})

    def _call(self, item: Item, where: str) -> None:
        call_id, name = item.get("call_id"), item.get("name")
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise invalid(where, "a call needs its call_id and name")
        if item.get("type") == "custom_tool_call":
            arguments = json_text({CUSTOM_INPUT: output_text(item.get("input"))})
        else:
            sent = item.get("arguments")
            arguments = sent if isinstance(sent, str) else json_text(sent or {})
        namespace = item.get("namespace")
        if isinstance(namespace, str) and namespace:
            name = f"{namespace}{NAMESPACE_SEPARATOR}{name}"
        message = self.open_assistant()
        message.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )

    def _compaction(self, item: Item, where: str) -> None:
        self.close_assistant()
        token = item.get("encrypted_content")
        scope = self.lookups.token_scope
        key = read_token(token, scope) if isinstance(token, str) and scope else None
        if key is None or not key.startswith("compaction:"):
            raise _lost_compaction(where, "was not issued by this proxy for this key")
        message = summary_message("")
        self.messages.append(message)
        self.summaries.append((message, key, where))

    def _reasoning(self, item: Item) -> None:
        token = item.get("encrypted_content")
        message = self.open_assistant()
        if not isinstance(token, str) or not token:
            return  # summary-only (the AI SDK, rewritten history): the store's keys still apply
        key = read_token(token, self.lookups.token_scope) if self.lookups.token_scope else None
        if key is None:
            self.translation.count("responses_foreign_receipt_token")
            return
        self.receipts.append((message, key))


async def input_messages(input_: Any, lookups: Lookups, translation: Translation) -> list[Message]:
    """The chat messages for `input`, receipts restored on the assistant messages whose tokens
    this proxy issued to this tenant."""
    if input_ is None:
        return []
    if isinstance(input_, str):
        return [{"role": "user", "content": input_}]
    if not isinstance(input_, list):
        raise invalid("input", "must be a string or a list of items")
    references = [
        item["id"]
        for item in input_
        if isinstance(item, dict)
        and item.get("type") == "item_reference"
        and isinstance(item.get("id"), str)
    ]
    input_ = _without_trigger(input_, translation)
    found = await lookups.items(references) if references else {}
    folder = _Folder(lookups, translation)
    for position, item in enumerate(input_):
        where = f"input[{position}]"
        if not isinstance(item, dict):
            raise invalid(where, "must be an object")
        if item.get("type") == "item_reference":
            item_id = item.get("id")
            if not isinstance(item_id, str):
                raise invalid(f"{where}.id", "required, a string")
            resolved = found.get(item_id)
            if resolved is None:
                raise FrontError(
                    400, f"Item with id '{item.get('id')}' not found.", "item_not_found", where
                )
            translation.count("responses_item_reference")
            item = resolved
        folder.add(item, where)
    for message, key, where in folder.summaries:
        summary = await lookups.summary(key)
        if summary is None:
            raise _lost_compaction(where, "names a summary no longer kept (the store's TTL)")
        message["content"] += summary
        translation.count(RESTORED_KIND)
    restored, unknown = await restore_turns(folder.receipts, lookups.turn)
    translation.count("responses_receipt_token_unknown", unknown)
    translation.count("responses_receipts_restored", restored)
    return folder.messages


def _without_trigger(input_: list[Any], translation: Translation) -> list[Any]:
    """`input` without Codex's `compaction_trigger`, which marks the turn a compaction; it may
    stand only last, once (as Codex sends it)."""
    where = [
        position
        for position, item in enumerate(input_)
        if isinstance(item, dict) and item.get("type") == TRIGGER
    ]
    if not where:
        return input_
    if where != [len(input_) - 1]:
        raise invalid(
            f"input[{where[0]}]", f"a {quoted(TRIGGER)} item may stand only once, as the last item"
        )
    translation.compacting = True
    return input_[:-1]


def _lost_compaction(where: str, why: str) -> FrontError:
    """A compaction item whose summary cannot be had. Refused rather than dropped: the model
    would go on without everything the summary held. Codex sends the item on every later turn,
    so the session cannot go on: the words say so."""
    return FrontError(
        400,
        f"{where}: this compaction item {why}; its summary cannot be restored. Start a new "
        "session: this one's history now rests on it",
        "invalid_value",
        where,
    )
