"""A Messages request's `system` and `messages` -> chat messages, block by kind.

`system` (a string or text blocks) is one system message, as is a `role: "system"` message
inside `messages` (Claude Code sends one besides the top level). A user turn: its `tool_result`
blocks first, as `tool` messages in order (a chat upstream wants them right after the
assistant's calls; each must answer a `tool_use` an earlier assistant turn issued), then its
text, `image` and `document` blocks (media.py) as one user message. An assistant turn: its
text, its `tool_use` blocks as calls with their ids as the upstream issued them (an id the
front wrote in Anthropic's alphabet read back, tool_use_ids.py), and the receipt key its
`thinking` block's signature carries (a `redacted_thinking` block this proxy never issued is
dropped and counted).

A block's `cache_control` goes where OpenRouter's chat API takes it (cache_marks.py): a marked
system prompt is text parts, one per block, each with its block's mark; a user turn's marked
text, image or document keeps its mark on its part (one marked text is a part, not a string);
a marked `tool_result` marks its `tool` message (its content stays a string), or the last of
its images and documents where they went; an assistant turn's last mark marks its message. A
request without marks becomes exactly what it did before marks were carried.
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.messages.anthropic_errors import MessagesError, string_at
from proxy.fronts.messages.cache_marks import MARK, mark_of, marked
from proxy.fronts.messages.media import document_parts, image_part
from proxy.fronts.messages.tool_use_ids import upstream_id
from proxy.fronts.messages.translated import ReadToken, Translated
from proxy.fronts.quoted import quoted
from proxy.wire import json_codec

SYSTEM_SEPARATOR = "\n\n"
"""Between a system prompt's blocks, sent as one string."""


def system_content(system: Any, where: str) -> str | list[dict[str, Any]]:
    """A system prompt (a string or text blocks) as chat content: one string, the blocks a
    blank line apart; text parts, one per block with its mark, when a block carries one."""
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        parts: list[dict[str, Any]] = []
        for block in system:
            if not isinstance(block, dict) or block.get("type") != "text":
                raise MessagesError(f"{where}: only text blocks are accepted")
            text = string_at(block.get("text"), f"{where}.text")
            parts.append(marked({"type": "text", "text": text}, mark_of(block)))
        if any(MARK in part for part in parts):
            return parts
        return SYSTEM_SEPARATOR.join(part["text"] for part in parts)
    raise MessagesError(f"{where}: must be a string or a list of text blocks")


def chat_messages(
    given: list[Any], messages: list[dict[str, Any]], out: Translated, read_token: ReadToken
) -> None:
    """`given` (the request's messages) onto `messages`, in order."""
    issued: set[str] = set()  # tool_use ids the assistant turns so far issued
    for position, message in enumerate(given):
        where = f"messages.{position}"
        if not isinstance(message, dict):
            raise MessagesError(f"{where}: must be an object")
        role = message.get("role")
        content = message.get("content")
        if role == "system":  # Claude Code sends one inside messages, besides the top level
            messages.append({"role": "system", "content": system_content(content, where)})
        elif role == "user":
            messages.extend(_user(content, where, issued, out))
        elif role == "assistant":
            assistant, key = _assistant(content, where, out, read_token)
            for call in assistant.get("tool_calls", ()):
                issued.add(call["id"])
            if key is not None:
                out.receipt_keys[len(messages)] = key
            messages.append(assistant)
        else:
            raise MessagesError(f"{where}.role: must be 'user' or 'assistant'")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MessagesError(f"{where}.content: must be a string or a list of blocks")
    for index, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise MessagesError(f"{where}.content.{index}: a block needs a type")
    return content


def _user(content: Any, where: str, issued: set[str], out: Translated) -> list[dict[str, Any]]:
    """A user turn: its tool results first, as `tool` messages in order (a chat upstream wants
    them right after the assistant's calls), then the rest as one user message."""
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(_blocks(content, where)):
        here = f"{where}.content.{index}"
        kind = block["type"]
        if kind == "tool_result":
            tool_message, media = _tool_result(block, here, issued, out)
            tools.append(tool_message)
            parts.extend(media)
        elif kind == "text":
            text = string_at(block.get("text"), f"{here}.text")
            parts.append(marked({"type": "text", "text": text}, mark_of(block)))
        elif kind == "image":
            parts.append(marked(image_part(block.get("source"), here), mark_of(block)))
        elif kind == "document":
            parts.extend(document_parts(block, here, out))
        else:
            raise MessagesError(
                f"{here}: block type {quoted(kind)} is not supported in a user turn"
            )
    messages = list(tools)
    if parts:
        # One unmarked text block as a string (what every chat upstream takes); a marked one,
        # or several blocks, stay parts.
        single = len(parts) == 1 and parts[0]["type"] == "text" and MARK not in parts[0]
        messages.append({"role": "user", "content": parts[0]["text"] if single else parts})
    return messages


def _tool_result(
    block: dict[str, Any], where: str, issued: set[str], out: Translated
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A `tool` message, and the images and documents the result held (a chat `tool` message
    takes text only, in OpenAI's schema and OpenRouter's: they follow in the user message).
    `is_error` has no chat field: the text says it. The block's mark marks the message, or the
    last of its images and documents, which end the result where they went."""
    given = block.get("tool_use_id")
    call_id = _restored(given, out) if isinstance(given, str) else given
    if not isinstance(call_id, str) or call_id not in issued:
        raise MessagesError(
            f"{where}: unexpected tool_use_id {quoted(given)} in tool_result blocks: "
            "each tool_result needs a tool_use block with that id in an earlier assistant turn"
        )
    texts: list[str] = []
    media: list[dict[str, Any]] = []
    for index, part in enumerate(_blocks(block.get("content", ""), where)):
        here = f"{where}.content.{index}"
        if part["type"] == "text":
            texts.append(string_at(part.get("text"), f"{here}.text"))
        elif part["type"] == "image":
            media.append(image_part(part.get("source"), here))
        elif part["type"] == "document":
            media.extend(document_parts(part, here, out))
        else:
            raise MessagesError(f"{here}: {quoted(part['type'])} is not supported")
    text = "".join(texts)
    if block.get("is_error") is True:
        text = f"Error: {text}" if text else "Error"
    message = {"role": "tool", "tool_call_id": call_id, "content": text}
    marked(media[-1] if media else message, mark_of(block))
    return message, media


def _assistant(
    content: Any, where: str, out: Translated, read_token: ReadToken
) -> tuple[dict[str, Any], str | None]:
    """An assistant turn: text, its calls with their ids as issued, and the receipt key its
    thinking block's signature carries (the thinking text itself is not sent: the upstream's
    own receipt, verbatim from the store, goes back in its place)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    key: str | None = None
    mark: dict[str, Any] | None = None
    for index, block in enumerate(_blocks(content, where)):
        here = f"{where}.content.{index}"
        kind = block["type"]
        if kind in ("text", "tool_use"):
            mark = mark_of(block) or mark
        if kind == "text":
            texts.append(string_at(block.get("text"), f"{here}.text"))
        elif kind == "tool_use":
            calls.append(_call(block, here, out))
        elif kind == "thinking":
            signature = block.get("signature")
            found = read_token(signature) if isinstance(signature, str) else None
            if found is None:
                out.count("thinking_signature_dropped")
            else:
                key = found
        elif kind == "redacted_thinking":
            out.count("thinking_signature_dropped")  # never issued by this proxy
        else:
            raise MessagesError(
                f"{here}: block type {quoted(kind)} is not supported in an assistant turn"
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return marked(message, mark), key


def _call(block: dict[str, Any], where: str, out: Translated) -> dict[str, Any]:
    call_id = _restored(string_at(block.get("id"), f"{where}.id"), out)
    name = string_at(block.get("name"), f"{where}.name")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise MessagesError(f"{where}.input: must be an object")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json_codec.dumps(arguments).decode()},
    }


def _restored(given: str, out: Translated) -> str:
    """The upstream's own id for one the front wrote in Anthropic's alphabet, counted."""
    call_id = upstream_id(given)
    if call_id != given:
        out.count("messages_tool_use_id_restored")
    return call_id
