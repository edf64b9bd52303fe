"""Remember what a provider attaches to an assistant turn and put it back on follow-ups."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import orjson

from proxy.repair.chunks import choice_index, choices_of
from proxy.repair.exchange import Exchange
from proxy.repair.pipeline import Chunk, Repair
from proxy.repair.profiles import ReceiptRule
from proxy.repair.receipts import injection
from proxy.repair.receipts.capture import FieldBuilder
from proxy.repair.receipts.store import MAX_VALUE_BYTES, ReceiptStore
from proxy.wire.json_paths import get_path, set_path


class ReceiptRepair(Repair):
    """Providers hand out data with an assistant turn and reject the next request without it:
    Gemini's thought signature on each tool call (`400 Function call is missing a
    thought_signature`), DeepSeek's `reasoning_content` on tool-calling turns (`400 The
    reasoning_content in the thinking mode must be passed back to the API.`), OpenRouter's
    `reasoning_details`. Almost every client drops them (the Vercel AI SDK files them under a
    custom provider's name; OpenAI SDK users rebuild messages without them). Following the
    profile's rules, this repair captures receipts from responses (written once, after the
    client has the whole answer), puts them back verbatim on the exact call or message they
    came with, fills Google's documented placeholder for current-turn steps nobody can sign,
    counts required receipts still missing, and strips Google metadata from requests to other
    upstreams. It never changes what the client is sent. Store writes are handed to the store
    at the end of the answer and never wait for it: a slow store must not delay `[DONE]`, and
    a client that hangs up at `[DONE]` must not cancel them. A request without any
    credential has no tenant: it gets no receipts and leaves none (counted once,
    `receipts_skipped_no_credential`), since a shared bucket would hand them to every keyless
    client.
    Recordings: `gemini_indexless_call_stop`, `gemini_signature_only_delta`,
    `gemini_text_thought_signature`.
    """

    def __init__(
        self,
        exchange: Exchange,
        store: ReceiptStore,
        *,
        placeholder_on_miss: bool = True,
        max_value_bytes: int = MAX_VALUE_BYTES,  # one default, which the settings take too
    ) -> None:
        self._exchange = exchange
        self._store = store
        self._profile = exchange.rules.profile
        self._scope = exchange.scope
        self._placeholder_on_miss = placeholder_on_miss
        self._max_value_bytes = max_value_bytes
        # No tenant (no credential): nothing is looked up, captured or stored for this exchange.
        self._keeps = self._profile.keeps_receipts and self._scope.keeps_receipts
        self._call_rules = self._profile.rules("call")
        self._message_rules = self._profile.rules("tool_turn") + self._profile.rules("text_turn")
        self._message_fields = frozenset(rule.path[0] for rule in self._message_rules)
        # Per choice: call ids in order (by stream index), call receipts, text, message fields.
        self._call_ids: dict[int, dict[int, str]] = defaultdict(dict)
        self._calls: dict[str, dict[str, Any]] = {}
        self._text: dict[int, injection.TextDigest] = {}
        self._fields: dict[int, list[FieldBuilder]] = {}
        self._captured: dict[str, dict[str, Any]] = {}

    async def on_request(self, body: dict[str, Any]) -> bool:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return False
        if not self._profile.keeps_receipts:
            removed = injection.strip_foreign(messages, self._profile)
            self._exchange.count("foreign_metadata_removed", removed)
            return removed > 0
        if not self._keeps:
            self._exchange.count("receipts_skipped_no_credential")
        keys = injection.receipt_keys(messages, self._profile) if self._keeps else []
        stored = await self._store.get_many([self._scope.key(k) for k in keys]) if keys else {}
        found = {key: stored[scoped] for key in keys if (scoped := self._scope.key(key)) in stored}
        removed = injection.strip_foreign(messages, self._profile, found)
        self._exchange.count("foreign_metadata_removed", removed)
        injected, restored = injection.inject(messages, self._profile, found)
        for kind, amount in injected.items():
            self._exchange.count(f"{kind}_injected", amount)
        for kind, amount in restored.items():
            self._exchange.note(
                f"{kind}_restored", "%d sent back altered; the issued value goes upstream", amount
            )
        placeholders = 0
        if self._placeholder_on_miss:
            placeholders = injection.fill_current_turn(messages, self._profile)
        placeholder = self._profile.first_call_placeholder
        if placeholders and placeholder is not None:  # none put without one
            kind = f"{placeholder.kind}_placeholders"
            self._exchange.note(kind, "%d current-turn step(s) had no receipt", placeholders)
        for kind, amount in injection.missing_required(messages, self._profile).items():
            self._exchange.note(f"{kind}_missing", "%d tool turn(s) without it", amount)
        changes = removed + sum(injected.values()) + sum(restored.values()) + placeholders
        return changes > 0

    def wants_chunks(self) -> bool:
        return self._keeps

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        if not self._keeps:
            return None  # the chain does not call it then (wants_chunks); direct callers may
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._observe(choice_index(choice), delta)
        return None  # only watches

    async def on_end(self) -> list[Chunk]:
        if not self._keeps:
            return []
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
                self._exchange.note("receipt_too_large", "not keeping an oversized receipt")
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
        messages = self._exchange.request.get("messages")
        return injection.last_user_text(messages if isinstance(messages, list) else [])

    async def _save(self, items: dict[str, dict[str, Any]]) -> None:
        """Hand the receipts to the store, and count them captured once it has them: a write
        that failed is not a capture. The wait is shielded, so a client leaving now does not
        cancel the write (its follow-up may still come from elsewhere)."""
        kept = {}
        for key, receipt in items.items():
            if len(orjson.dumps(receipt)) > self._max_value_bytes:
                self._exchange.note("receipt_too_large", "not storing an oversized receipt")
                continue
            kept[self._scope.key(key)] = receipt
        if kept and not await asyncio.shield(self._store.put_later(kept)):
            self._exchange.note("receipts_not_stored", "%d lost: the store failed", len(kept))
        elif kept:
            for receipt in kept.values():
                for kind in {r.kind for r in self._profile.receipts if get_path(receipt, r.path)}:
                    self._exchange.count(f"{kind}_captured")


def _receipt(source: dict[str, Any], rules: tuple[ReceiptRule, ...]) -> dict[str, Any]:
    """The receipt fields `source` carries, as a sparse copy keyed by the same paths."""
    builders = [FieldBuilder(rule) for rule in rules]
    receipt: dict[str, Any] = {}
    for builder in builders:
        builder.feed(source)
        if builder.value() is not None:
            set_path(receipt, builder.rule.path, builder.value())
    return receipt
