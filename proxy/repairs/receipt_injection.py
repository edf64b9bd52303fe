"""Request side of receipts: which assistant turns need what, put back, or kept away."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from proxy.json_paths import get_path, remove_path, set_path
from proxy.profiles import ProviderProfile

Message = dict[str, Any]


def call_key(call_id: str) -> str:
    return f"call:{call_id}"


def text_key(text: str, prompt: str) -> str:
    """Text turns have no id: the assistant text and the user text it answered, hashed, name
    them (the same answer to different questions keeps its own receipt)."""
    digest = hashlib.sha256(f"{prompt.strip()}\x1f{text.strip()}".encode()).hexdigest()
    return "text:" + digest[:32]


def last_user_text(messages: list[Any]) -> str:
    """The newest user text in `messages`: what an answer that follows them replies to."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = message_text(message)
            if text:
                return text
    return ""


def message_text(message: Message) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    return None


def assistant_messages(messages: list[Any]) -> Iterator[tuple[Message, str]]:
    """Each assistant message with the user text it answers."""
    prompt = ""
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "user":
            prompt = message_text(message) or prompt
        elif message.get("role") == "assistant":
            yield message, prompt


def calls_of(message: Message) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def wanted_keys(messages: list[Any], profile: ProviderProfile) -> list[str]:
    """Store keys for every assistant call or text turn that lacks one of its receipts."""
    keys: list[str] = []
    for message, prompt in assistant_messages(messages):
        calls = calls_of(message)
        for call in calls:
            if isinstance(call.get("id"), str) and _lacks(call, profile.call_receipts):
                keys.append(call_key(call["id"]))
        text = message_text(message)
        if not calls and text and _lacks(message, profile.text_receipts):
            keys.append(text_key(text, prompt))
    return keys


def inject(messages: list[Any], profile: ProviderProfile, found: dict[str, dict[str, Any]]) -> int:
    """Put stored receipts back on exactly the call or message they came with; a value the
    client sent is never replaced. Returns how many fields were put back."""
    injected = 0
    for message, prompt in assistant_messages(messages):
        calls = calls_of(message)
        for call in calls:
            if _lacks(call, profile.call_receipts) and isinstance(call.get("id"), str):
                injected += _apply(call, profile.call_receipts, found.get(call_key(call["id"])))
        text = message_text(message)
        if not calls and text and _lacks(message, profile.text_receipts):
            receipt = found.get(text_key(text, prompt))
            injected += _apply(message, profile.text_receipts, receipt)
    return injected


def fill_current_turn(messages: list[Any], profile: ProviderProfile) -> int:
    """The upstream validates only the current turn (after the newest user message with real
    text), where the first call of every step must carry its receipt. Put the documented
    placeholder where none exists anywhere. Returns how many were put."""
    if profile.first_call_placeholder is None:
        return 0
    path, placeholder = profile.first_call_placeholder
    put = 0
    for message, _ in assistant_messages(messages[_current_turn_start(messages) :]):
        calls = calls_of(message)
        if calls and _lacks(calls[0], profile.call_receipts):
            put += set_path(calls[0], path, placeholder)
    return put


def strip_foreign(messages: list[Any], profile: ProviderProfile) -> int:
    """Remove metadata another provider issued (a chat that switched models mid-way)."""
    removed = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        for target in (message, *calls_of(message)):
            removed += sum(remove_path(target, path) for path in profile.foreign_metadata)
    return removed


def _current_turn_start(messages: list[Any]) -> int:
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if isinstance(message, dict) and message.get("role") == "user" and message_text(message):
            return position + 1
    return 0


def _lacks(target: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> bool:
    """Carries none of its receipts (a client that kept one kept the one that matters)."""
    return all(get_path(target, path) is None for path in paths)


def _apply(target: dict[str, Any], paths: tuple[tuple[str, ...], ...], receipt: Any) -> int:
    if not isinstance(receipt, dict):
        return 0
    return sum(
        set_path(target, path, value)
        for path in paths
        if (value := get_path(receipt, path)) is not None
    )
