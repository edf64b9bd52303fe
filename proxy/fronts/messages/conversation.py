"""A Messages request's `system` and `messages` -> chat messages, block by kind.

`system` (a string or text blocks, their `cache_control` without a chat twin) is one system
message, as is a `role: "system"` message inside `messages` (Claude Code sends one besides the
top level). A user turn: its `tool_result` blocks first, as `tool` messages in order (a chat
upstream wants them right after the assistant's calls; each must answer a `tool_use` an earlier
assistant turn issued), then its text and `image` blocks as one user message. An assistant
turn: its text, its `tool_use` blocks as calls with their ids as the upstream issued them (an
id the front wrote in Anthropic's alphabet read back, tool_use_ids.py), and the receipt key
its `thinking` block's signature carries (a `redacted_thinking` block this proxy never issued
is dropped and counted).
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.messages.anthropic_errors import MessagesError, string_at
from proxy.fronts.messages.tool_use_ids import upstream_id
from proxy.fronts.messages.translated import ReadToken, Translated
from proxy.fronts.quoted import quoted
from proxy.wire import json_codec


def system_text(system: Any, where: str) -> str:
    """A system prompt as a string or text blocks (their cache_control has no chat twin)."""
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        texts = []
        for block in system:
            if not isinstance(block, dict) or block.get("type") != "text":
                raise MessagesError(f"{where}: only text blocks are accepted")
            texts.append(string_at(block.get("text"), f"{where}.text"))
        return "\n\n".join(texts)
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
            messages.append({"role": "system", "content": system_text(content, where)})
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


def _user(
    content: Any, where: str, issued: set[str], translated: Translated
) -> list[dict[str, Any]]:
    """A user turn: its tool results first, as `tool` messages in order (a chat upstream wants
    them right after the assistant's calls), then the rest as one user message."""
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(_blocks(content, where)):
        here = f"{where}.content.{index}"
        kind = block["type"]
        if kind == "tool_result":
            tool_message, images = _tool_result(block, here, issued, translated)
            tools.append(tool_message)
            parts.extend(images)
        elif kind == "text":
            parts.append({"type": "text", "text": string_at(block.get("text"), f"{here}.text")})
        elif kind == "image":
            parts.append(_image(block.get("source"), here))
        else:
            raise MessagesError(
                f"{here}: block type {quoted(kind)} is not supported in a user turn"
            )
    out = list(tools)
    if parts:
        # One text block as a string (what every chat upstream takes); several stay parts.
        single = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": "user", "content": parts[0]["text"] if single else parts})
    return out


def _image(source: Any, where: str) -> dict[str, Any]:
    if isinstance(source, dict) and source.get("type") == "base64":
        media = string_at(source.get("media_type"), f"{where}.source.media_type")
        data = string_at(source.get("data"), f"{where}.source.data")
        return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
    if isinstance(source, dict) and source.get("type") == "url":
        url = string_at(source.get("url"), f"{where}.source.url")
        return {"type": "image_url", "image_url": {"url": url}}
    raise MessagesError(f"{where}.source: an image's source must be base64 or url")


def _tool_result(
    block: dict[str, Any], where: str, issued: set[str], translated: Translated
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A `tool` message, and the images the result held (a chat `tool` message takes text
    only; they follow in the user message). `is_error` has no chat field: the text says it."""
    given = block.get("tool_use_id")
    call_id = _restored(given, translated) if isinstance(given, str) else given
    if not isinstance(call_id, str) or call_id not in issued:
        raise MessagesError(
            f"{where}: unexpected tool_use_id {quoted(given)} in tool_result blocks: "
            "each tool_result needs a tool_use block with that id in an earlier assistant turn"
        )
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for index, part in enumerate(_blocks(block.get("content", ""), where)):
        if part["type"] == "text":
            texts.append(string_at(part.get("text"), f"{where}.content.{index}.text"))
        elif part["type"] == "image":
            images.append(_image(part.get("source"), f"{where}.content.{index}"))
        else:
            raise MessagesError(f"{where}.content.{index}: {quoted(part['type'])} is not supported")
    text = "".join(texts)
    if block.get("is_error") is True:
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _assistant(
    content: Any, where: str, out: Translated, read_token: ReadToken
) -> tuple[dict[str, Any], str | None]:
    """An assistant turn: text, its calls with their ids as issued, and the receipt key its
    thinking block's signature carries (the thinking text itself is not sent: the upstream's
    own receipt, verbatim from the store, goes back in its place)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    key: str | None = None
    for index, block in enumerate(_blocks(content, where)):
        here = f"{where}.content.{index}"
        kind = block["type"]
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
    return message, key


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
