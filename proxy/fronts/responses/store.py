"""What the Responses front keeps between exchanges, in the receipt store's backend (so Redis
shares it between replicas, under the receipt store's TTL), scoped per tenant and upstream.

- `turn:{response id}`: the repaired assistant chat message of one response, receipts
  attached. The reasoning item's `encrypted_content` token names it, so a client that keeps no
  state (Codex, `store: false`) gets the receipts back on the right assistant message.
- `resp:{response id}`: the repaired chat transcript up to and including the response's
  assistant turn, without the `instructions` (OpenAI does not carry them over a
  `previous_response_id`), for a continuation.
- `item:{item id}`: an output item, for an `item_reference` (the AI SDK with `store` unset).

A transcript larger than MAX_TRANSCRIPT_BYTES is not kept (a continuation of it is then
answered `previous_response_not_found`, as after its TTL): no client may grow the store
without bound. Writes go out before the terminal event (clients fire the next request at once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.repair.receipts.store import ReceiptStore
from proxy.repair.tenancy import ReceiptScope

MAX_TRANSCRIPT_BYTES = 8 * 1_048_576


@dataclass(frozen=True, slots=True)
class ResponsesStore:
    """The front's view of the receipt store for one tenant on one upstream."""

    store: ReceiptStore
    scope: ReceiptScope

    @property
    def usable(self) -> bool:
        """A request without a credential has no tenant: nothing is kept or read for it."""
        return self.scope.keeps_receipts

    @property
    def token_scope(self) -> str:
        """What a receipt token is bound to: this tenant on this upstream."""
        return self.scope.key("") if self.usable else ""

    async def transcript(self, response_id: str) -> list[dict[str, Any]] | None:
        found = await self._get(f"resp:{response_id}")
        messages = found.get("messages") if found else None
        return messages if isinstance(messages, list) else None

    async def turn(self, receipt_key: str) -> dict[str, Any] | None:
        found = await self._get(receipt_key)
        message = found.get("message") if found else None
        return message if isinstance(message, dict) else None

    async def items(self, item_ids: list[str]) -> dict[str, dict[str, Any]]:
        if not self.usable or not item_ids:
            return {}
        keys = {self.scope.key(f"item:{item_id}"): item_id for item_id in item_ids}
        found = await self.store.get_many(list(keys))
        return {
            keys[key]: value["item"]
            for key, value in found.items()
            if isinstance(value.get("item"), dict)
        }

    async def save(
        self,
        response_id: str,
        assistant: dict[str, Any],
        transcript: list[dict[str, Any]] | None,
        items: list[dict[str, Any]],
    ) -> bool:
        """Keep one response: its turn always (the token points there), the transcript and the
        items when the client asked to store. False when the backend failed or nothing could
        be kept."""
        if not self.usable:
            return False
        records: dict[str, dict[str, Any]] = {
            self.scope.key(turn_key(response_id)): {"message": assistant}
        }
        if transcript is not None and len(orjson.dumps(transcript)) <= MAX_TRANSCRIPT_BYTES:
            records[self.scope.key(f"resp:{response_id}")] = {"messages": transcript}
        for item in items:
            if isinstance(item.get("id"), str):
                records[self.scope.key(f"item:{item['id']}")] = {"item": item}
        return await self.store.put_many(records)

    async def _get(self, key: str) -> dict[str, Any] | None:
        if not self.usable:
            return None
        full = self.scope.key(key)
        return (await self.store.get_many([full])).get(full)


def turn_key(response_id: str) -> str:
    return f"turn:{response_id}"
