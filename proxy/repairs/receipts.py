"""Remember what a provider attaches to an assistant turn and put it back on follow-ups."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import orjson

from proxy.chunks import choice_index, choices_of
from proxy.exchange import Exchange
from proxy.json_paths import get_path, set_path
from proxy.pipeline import Chunk, Repair
from proxy.repairs import receipt_injection as injection
from proxy.store import ReceiptStore


class ReceiptRepair(Repair):
    """Gemini attaches a thought signature to each tool call (and to text turns) and rejects
    the next request with `400 Function call is missing a thought_signature` when it does not
    come back. Almost every client drops it: the Vercel AI SDK files it under a custom
    provider's name and never sends it, Open WebUI keeps it for one request, OpenAI SDK users
    rebuild messages without `extra_content`. This repair captures receipts from responses
    (written once, after the client has the whole answer), puts them back on the exact call
    or message they came with, fills the documented placeholder for current-turn steps
    nobody can sign, and strips Google metadata from requests to other upstreams.
    Recordings: `gemini_indexless_call_stop`, `gemini_signature_only_delta`,
    `gemini_text_thought_signature`.
    """

    def __init__(
        self,
        exchange: Exchange,
        store: ReceiptStore,
        *,
        placeholder_on_miss: bool = True,
        max_value_bytes: int = 65_536,
    ) -> None:
        self._exchange = exchange
        self._store = store
        self._profile = exchange.profile
        self._scope = exchange.scope
        self._placeholder_on_miss = placeholder_on_miss
        self._max_value_bytes = max_value_bytes
        self._call_ids: dict[tuple[int, int], str] = {}
        self._calls: dict[str, dict[str, Any]] = {}
        self._text: dict[int, list[str]] = defaultdict(list)
        self._text_receipts: dict[int, dict[str, Any]] = {}
        self._captured: dict[str, dict[str, Any]] = {}

    async def on_request(self, body: dict[str, Any]) -> bool:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return False
        if not self._profile.keeps_receipts:
            removed = injection.strip_foreign(messages, self._profile)
            self._exchange.count("foreign_metadata_removed", removed)
            return removed > 0
        keys = injection.wanted_keys(messages, self._profile)
        stored = await self._store.get_many([self._scope.key(k) for k in keys]) if keys else {}
        found = {key: stored[scoped] for key in keys if (scoped := self._scope.key(key)) in stored}
        injected = injection.inject(messages, self._profile, found)
        placeholders = 0
        if self._placeholder_on_miss:
            placeholders = injection.fill_current_turn(messages, self._profile)
        self._exchange.count("signatures_injected", injected)
        if placeholders:
            self._exchange.note(
                "signature_placeholders", "%d current-turn step(s) had no receipt", placeholders
            )
        return injected + placeholders > 0

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        if not self._profile.keeps_receipts:
            return None
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._observe(choice_index(choice), delta)
        return None  # only watches

    async def on_end(self) -> list[Chunk]:
        items = {}
        for call_id, call in self._calls.items():
            items[injection.call_key(call_id)] = call
        for index, receipt in self._text_receipts.items():
            text = "".join(self._text[index])
            if text.strip():
                items[injection.text_key(text, self._prompt())] = receipt
        self._captured.update(items)
        return []

    async def on_close(self) -> None:
        await self._save(self._captured)

    async def on_response(self, body: dict[str, Any]) -> bool:
        if not self._profile.keeps_receipts:
            return False
        items = {}
        for choice in choices_of(body):
            message = choice.get("message")
            if not isinstance(message, dict):
                continue
            calls = injection.calls_of(message)
            for call in calls:
                receipt = self._receipt(call, self._profile.call_receipts)
                if receipt and isinstance(call.get("id"), str):
                    items[injection.call_key(call["id"])] = receipt
            text = injection.message_text(message)
            receipt = self._receipt(message, self._profile.text_receipts)
            if not calls and text and receipt:
                items[injection.text_key(text, self._prompt())] = receipt
        self._captured.update(items)
        return False

    def _prompt(self) -> str:
        messages = self._exchange.request.get("messages")
        return injection.last_user_text(messages if isinstance(messages, list) else [])

    def _observe(self, index: int, delta: dict[str, Any]) -> None:
        content = delta.get("content")
        if isinstance(content, str):
            self._text[index].append(content)
        receipt = self._receipt(delta, self._profile.text_receipts)
        if receipt:
            self._text_receipts[index] = receipt
        for entry in delta.get("tool_calls") or ():
            if not isinstance(entry, dict):
                continue
            position = (index, entry.get("index", 0))
            if isinstance(entry.get("id"), str):
                self._call_ids[position] = entry["id"]
            call_id = self._call_ids.get(position)
            receipt = self._receipt(entry, self._profile.call_receipts)
            if call_id and receipt:
                self._calls.setdefault(call_id, {}).update(receipt)

    @staticmethod
    def _receipt(source: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
        """The receipt fields `source` carries, as a sparse copy keyed by the same paths."""
        receipt: dict[str, Any] = {}
        for path in paths:
            value = get_path(source, path)
            if value is not None:
                set_path(receipt, path, value)
        return receipt

    async def _save(self, items: dict[str, dict[str, Any]]) -> None:
        kept = {}
        for key, receipt in items.items():
            if len(orjson.dumps(receipt)) > self._max_value_bytes:
                self._exchange.note("receipt_too_large", "not storing an oversized receipt")
                continue
            kept[self._scope.key(key)] = receipt
        if kept:
            await self._store.put_many(kept)
            self._exchange.count("signatures_captured", len(kept))
