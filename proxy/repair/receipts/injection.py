"""Request side of receipts: which assistant turns need what, put back, or kept away."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from proxy.repair.profiles import ProviderProfile, ReceiptRule
from proxy.wire.json_paths import get_path, remove_path, set_path
from proxy.wire.json_shapes import objects_in

Message = dict[str, Any]


def call_key(call_id: str) -> str:
    """Short ids stay readable in the store; a long one is hashed, so no upstream can grow
    the store through its keys."""
    if len(call_id) <= 128:
        return f"call:{call_id}"
    return "call:#" + hashlib.sha256(call_id.encode()).hexdigest()


def turn_key(call_ids: list[str]) -> str:
    """A tool-calling turn is named by its calls' ids, in order."""
    return "turn:" + hashlib.sha256("\x1f".join(call_ids).encode()).hexdigest()[:32]


def text_key(text: str, prompt: str) -> str:
    """Text turns have no id: the assistant text and the user text it answered, hashed, name
    them (the same answer to different questions keeps its own receipt)."""
    digest = hashlib.sha256(f"{prompt.strip()}\x1f{text.strip()}".encode()).hexdigest()
    return "text:" + digest[:32]


class TextDigest:
    """`text_key` of a text that streams in pieces, without holding the text: the key
    `text_key(text, prompt)` gives for the pieces joined. Whitespace at the end so far counts
    only if more text follows: up to HELD characters of it wait as text, beyond that they go
    into a copy of the hash that takes over when text follows, so an upstream streaming
    endless whitespace costs nothing either."""

    HELD = 4096

    def __init__(self, prompt: str) -> None:
        self._hash = hashlib.sha256(f"{prompt.strip()}\x1f".encode())
        self._tail: Any = None  # the hash with the whitespace beyond HELD, once there is such
        self._started = False
        self._pending = ""
        self.seen_text = False
        """A non-empty piece arrived: the turn has text, so it can be named."""

    def feed(self, piece: str) -> None:
        if not piece:
            return
        self.seen_text = True
        if not self._started:
            piece = piece.lstrip()
            if not piece:
                return
            self._started = True
        core = piece.rstrip()
        if core:
            if self._tail is not None:
                self._hash, self._tail = self._tail, None
            self._hash.update((self._pending + core).encode())
            self._pending = ""
        self._hold(piece[len(core) :])

    def _hold(self, whitespace: str) -> None:
        self._pending += whitespace
        if len(self._pending) > self.HELD:
            if self._tail is None:
                self._tail = self._hash.copy()
            self._tail.update(self._pending.encode())
            self._pending = ""

    def key(self) -> str:
        return "text:" + self._hash.hexdigest()[:32]


def message_key(message: Message, prompt: str) -> tuple[str, str] | None:
    """(rule scope, store key) of an assistant message, or None when it cannot be named."""
    ids = [c["id"] for c in calls_of(message) if isinstance(c.get("id"), str)]
    if ids:
        return "tool_turn", turn_key(ids)
    text = message_text(message)
    return ("text_turn", text_key(text, prompt)) if text else None


def message_text(message: Message) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    return None


def last_user_text(messages: list[Any]) -> str:
    """The newest user text in `messages`: what an answer that follows them replies to."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = message_text(message)
            if text:
                return text
    return ""


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
    return objects_in(message.get("tool_calls"))


def _targets(
    messages: list[Any], profile: ProviderProfile
) -> Iterator[tuple[dict[str, Any], tuple[ReceiptRule, ...], str]]:
    """(object, its rules, its store key) for every call and message that could carry one."""
    call_rules = profile.rules("call")
    for message, prompt in assistant_messages(messages):
        for call in calls_of(message) if call_rules else ():
            if isinstance(call.get("id"), str):
                yield call, call_rules, call_key(call["id"])
        named = message_key(message, prompt)
        if named is not None and (rules := profile.rules(named[0])):
            yield message, rules, named[1]


def receipt_keys(messages: list[Any], profile: ProviderProfile) -> list[str]:
    """Store keys for every call and message that could carry a receipt: the ones without
    one get it back, the ones with one are checked against what the upstream issued."""
    return [key for _, _, key in _targets(messages, profile)]


def inject(
    messages: list[Any], profile: ProviderProfile, found: dict[str, dict[str, Any]]
) -> tuple[dict[str, int], dict[str, int]]:
    """Put stored receipts back verbatim on exactly the call or message they came with.

    A value the client dropped is put back ("injected"). A value the client sent that differs
    from the one the upstream issued for that very call or turn goes back as issued
    ("restored"): OpenAI's SDK stream accumulator concatenates every string field of
    `reasoning_details` pieces (`format` comes back as `unknownunknown…`, a summary and an
    encrypted block merge), and the upstream then rejects or degrades the follow-up. An
    unaltered value, and a turn the proxy never saw, are left alone. Each kind is judged on its
    own: the AI SDK sends the reasoning it kept back as `reasoning_content`, and OpenRouter still
    needs the `reasoning_details` it dropped. Returns both counts, by kind."""
    injected: dict[str, int] = {}
    restored: dict[str, int] = {}
    for target, rules, key in _targets(messages, profile):
        receipt = found.get(key)
        if not isinstance(receipt, dict):
            continue
        lacking = {rule.kind for rule in rules if _lacks(target, _siblings(rule, rules))}
        for rule in rules:
            issued = get_path(receipt, rule.path)
            if issued is None:
                continue
            sent = get_path(target, rule.path)
            if rule.kind in lacking and sent in (None, "", []):
                counts = injected
            elif sent not in (None, "", []) and sent != issued:
                counts = restored
            else:
                continue  # as issued, or a sibling field the client kept (Google vs Vertex)
            if set_path(target, rule.path, issued, replace=counts is restored):
                counts[rule.kind] = counts.get(rule.kind, 0) + 1
    return injected, restored


def missing_required(messages: list[Any], profile: ProviderProfile) -> dict[str, int]:
    """Tool turns still lacking a receipt the upstream requires: counted, never invented."""
    missing: dict[str, int] = {}
    for message, _ in assistant_messages(messages):
        if calls_of(message):
            for rule in profile.rules("tool_turn"):
                if rule.required and get_path(message, rule.path) in (None, "", []):
                    missing[rule.kind] = missing.get(rule.kind, 0) + 1
    return missing


def fill_current_turn(messages: list[Any], profile: ProviderProfile) -> int:
    """The upstream validates only the current turn (after the newest user message with real
    text), where the first call of every step must carry its receipt. Put the documented
    placeholder (`profile.first_call_placeholder`) where none exists anywhere. Returns how many
    were put."""
    placeholder = profile.first_call_placeholder
    if placeholder is None:
        return 0
    call_rules = profile.rules("call")
    put = 0
    for message, _ in assistant_messages(messages[_current_turn_start(messages) :]):
        calls = calls_of(message)
        if calls and _lacks(calls[0], call_rules):
            put += set_path(calls[0], placeholder.path, placeholder.value)
    return put


def strip_foreign(
    messages: list[Any], profile: ProviderProfile, found: dict[str, dict[str, Any]] | None = None
) -> int:
    """Remove metadata another provider issued (a chat that switched models mid-way). Under
    `profile.foreign_kept_where_issued`, a field stays on a call or turn for which this upstream
    issued it (`found`, its receipts from the store): it is this upstream's own."""
    if not profile.foreign_metadata:
        return 0
    issued = _issued_here(messages, profile, found or {})
    heads = {path[0] for path in profile.foreign_metadata}
    removed = 0
    for message in messages:
        if not isinstance(message, dict):
            continue
        for target in (message, *calls_of(message)):
            if heads.isdisjoint(target) or id(target) in issued:
                continue  # most messages and calls carry none of the fields at all
            removed += sum(remove_path(target, path) for path in profile.foreign_metadata)
    return removed


def _issued_here(
    messages: list[Any], profile: ProviderProfile, found: dict[str, dict[str, Any]]
) -> set[int]:
    """The calls and messages whose stored receipt carries one of the foreign fields."""
    if not profile.foreign_kept_where_issued or not found:
        return set()
    return {
        id(target)
        for target, _, key in _targets(messages, profile)
        if isinstance(found.get(key), dict)
        and any(get_path(found[key], path) is not None for path in profile.foreign_metadata)
    }


def _current_turn_start(messages: list[Any]) -> int:
    for position in range(len(messages) - 1, -1, -1):
        message = messages[position]
        if isinstance(message, dict) and message.get("role") == "user" and message_text(message):
            return position + 1
    return 0


def _siblings(rule: ReceiptRule, rules: tuple[ReceiptRule, ...]) -> tuple[ReceiptRule, ...]:
    """The places one receipt may sit: the rules of its kind (Google's signature under
    `extra_content.google` or, as Vertex reports it, `extra_content.vertex`)."""
    return tuple(other for other in rules if other.kind == rule.kind)


def _lacks(target: dict[str, Any], rules: tuple[ReceiptRule, ...]) -> bool:
    """Carries none of these receipts (a client that kept a signature in one namespace kept
    it). An empty value is no receipt: clients that drop reasoning often leave `""` or `[]`."""
    return all(get_path(target, rule.path) in (None, "", []) for rule in rules)
