"""Stream side of receipts: what a provider attaches to an answer, kept for its follow-ups."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from proxy.repair.chunks import choice_index, choices_of
from proxy.repair.forwarded import Forwarded
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.profiles import ReceiptRule
from proxy.repair.receipts import injection
from proxy.repair.receipts.capture import FieldBuilder
from proxy.repair.tally import Tally
from proxy.store.protocol import MAX_VALUE_BYTES, Store
from proxy.wire import json_codec
from proxy.wire.json_paths import get_path, set_path


class ReceiptCapture(Link):
    """The answer carries what the upstream needs back on the next request (Gemini's thought
    signatures, DeepSeek's `reasoning_content` on tool turns, OpenRouter's `reasoning_details`;
    repairs/receipts.py says why and puts them back): following the profile's rules, this link
    watches the answer as the client receives it (the call ids as sent) and, at its end, hands
    what it captured to the store in one write. It never changes what the client is sent. The
    write never waits for the store: a slow store must not delay `[DONE]`, and a client that
    hangs up at `[DONE]` must not cancel it. Built only when both the profile and the exchange
    keep receipts (a request without a credential has no tenant and leaves none).
    Recordings: `gemini_indexless_call_stop`, `gemini_signature_only_delta`,
    `gemini_text_thought_signature`.
    """

    def __init__(
        self,
        forwarded: Forwarded,
        tally: Tally,
        store: Store,
        max_value_bytes: int = MAX_VALUE_BYTES,  # one default, which the settings take too
    ) -> None:
        self._forwarded = forwarded
        self._tally = tally
        self._store = store
        self._profile = forwarded.rules.profile
        self._scope = forwarded.scope
        self._max_value_bytes = max_value_bytes
        self._call_rules = self._profile.rules("call")
        self._message_rules = self._profile.rules("message")
        self._message_fields = frozenset(rule.path[0] for rule in self._message_rules)
        # Per choice: call ids in order (by stream index), call receipts, text, message fields.
        self._call_ids: dict[int, dict[int, str]] = defaultdict(dict)
        self._calls: dict[str, dict[str, Any]] = {}
        self._text: dict[int, injection.TextDigest] = {}
        self._fields: dict[int, list[FieldBuilder]] = {}
        self._captured: dict[str, dict[str, Any]] = {}

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._observe(choice_index(choice), delta)
        return None  # only watches

    async def on_end(self) -> list[Chunk]:
        for call_id, receipt in self._calls.items():
            self._captured[injection.call_key(call_id)] = receipt
        for index in set(self._fields) | set(self._call_ids) | set(self._text):
            ids = [self._call_ids[index][i] for i in sorted(self._call_ids[index])]
            text = self._text.get(index)
            if ids:
                named: tuple[str, str] | None = ("tool_turn", injection.turn_key(ids))
            else:
                named = ("text_turn", text.key()) if text and text.seen_text else None
            builders = self._fields.get(index, ())
            if any(b.oversized for b in builders):
                self._tally.note("receipt_too_large", "not keeping an oversized receipt")
                continue  # past max_value_bytes while it streamed: dropped then, not stored
            self._capture(named, {b.rule.path: b.value() for b in builders})
        await self._save(self._captured)
        return []

    def _observe(self, index: int, delta: dict[str, Any]) -> None:
        content = delta.get("content")
        if isinstance(content, str):
            digest = self._text.get(index)
            if digest is None:
                digest = self._text[index] = injection.TextDigest(self._prompt())
            digest.feed(content)
        # Most deltas carry only text: the builders are fed only when a receipt field is there
        # (the evidence profile watches every stream, so this runs for every chunk).
        if self._message_fields and not self._message_fields.isdisjoint(delta):
            builders = self._fields.setdefault(
                index, [FieldBuilder(rule, self._max_value_bytes) for rule in self._message_rules]
            )
            for builder in builders:
                builder.feed(delta)
        for entry in delta.get("tool_calls") or ():
            if not isinstance(entry, dict):
                continue
            position = entry.get("index", 0)
            if isinstance(entry.get("id"), str):
                self._call_ids[index][position] = entry["id"]
            call_id = self._call_ids[index].get(position)
            receipt = _receipt(entry, self._call_rules)
            if call_id and receipt:
                self._calls.setdefault(call_id, {}).update(receipt)

    def _capture(self, named: tuple[str, str] | None, values: dict[tuple[str, ...], Any]) -> None:
        if named is None:
            return
        scope, key = named
        receipt: dict[str, Any] = {}
        for rule in self._profile.rules(scope):
            value = values.get(rule.path)
            if value not in (None, "", []):
                set_path(receipt, rule.path, value)
        if receipt:
            self._captured[key] = receipt

    def _prompt(self) -> str:
        messages = self._forwarded.body.get("messages")
        return injection.last_user_text(messages if isinstance(messages, list) else [])

    async def _save(self, items: dict[str, dict[str, Any]]) -> None:
        """Hand the receipts to the store, and count them captured once it has them: a write
        that failed is not a capture. The wait is shielded, so a client leaving now does not
        cancel the write (its follow-up may still come from elsewhere)."""
        kept = {}
        for key, receipt in items.items():
            if len(json_codec.dumps(receipt)) > self._max_value_bytes:
                self._tally.note("receipt_too_large", "not storing an oversized receipt")
                continue
            kept[self._scope.key(key)] = receipt
        if kept and not await asyncio.shield(self._store.put_later(kept)):
            self._tally.note("receipts_not_stored", "%d lost: the store failed", len(kept))
        elif kept:
            for receipt in kept.values():
                for kind in {r.kind for r in self._profile.receipts if get_path(receipt, r.path)}:
                    self._tally.count(f"{kind}_captured")


def _receipt(source: dict[str, Any], rules: tuple[ReceiptRule, ...]) -> dict[str, Any]:
    """The receipt fields `source` carries, as a sparse copy keyed by the same paths."""
    builders = [FieldBuilder(rule) for rule in rules]
    receipt: dict[str, Any] = {}
    for builder in builders:
        builder.feed(source)
        if builder.value() is not None:
            set_path(receipt, builder.rule.path, builder.value())
    return receipt
