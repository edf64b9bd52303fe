"""What the Responses front keeps between exchanges besides the turn (fronts/turns.py), in the
store (proxy/store/; so Redis shares it between replicas, under the store's TTL),
scoped per tenant and upstream.

- `turn:{response id}` (fronts/turns.py): the repaired assistant chat message of one
  response, receipts attached. The reasoning item's `encrypted_content` token names it, so a
  client that keeps no state (Codex, `store: false`) gets the receipts back on the right
  assistant message.
- `resp:{response id}`: the repaired chat transcript up to and including the response's
  assistant turn, without the `instructions` (OpenAI does not carry them over a
  `previous_response_id`), for a continuation.
- `item:{item id}`: an output item, for an `item_reference` (the AI SDK with `store` unset).
- `compaction:{response id}`: the summary a compaction turn wrote (compaction.py), named by
  the token in the compaction item's `encrypted_content`; kept whatever `store` says (Codex
  sends `store: false` and needs it back).

A transcript larger than MAX_TRANSCRIPT_BYTES is not kept (a continuation of it is then
answered `previous_response_not_found`, as after its TTL): no client may grow the store
without bound. Writes go out before the terminal event (clients fire the next request at once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.fronts.turns import TurnStore
from proxy.wire import json_codec

MAX_TRANSCRIPT_BYTES = 8 * 1_048_576


@dataclass(frozen=True, slots=True)
class ResponsesStore(TurnStore):
    """The front's view of the store (proxy/store/) for one tenant on one upstream."""

    async def transcript(self, response_id: str) -> list[dict[str, Any]] | None:
        found = await self.get(f"resp:{response_id}")
        messages = found.get("messages") if found else None
        return messages if isinstance(messages, list) else None

    async def summary(self, key: str) -> str | None:
        """A compaction's summary (fronts/responses/compaction.py) by its key."""
        found = await self.get(key)
        summary = found.get("summary") if found else None
        return summary if isinstance(summary, str) else None

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
        assistant: dict[str, Any] | None,
        transcript: list[dict[str, Any]] | None,
        items: list[dict[str, Any]],
    ) -> bool:
        """Keep one response: its turn (the token points there), the transcript and the items
        when the client asked to store. False when the backend failed or nothing was kept."""
        return await self.keep(response_id, assistant, records(response_id, transcript, items))


def records(
    response_id: str, transcript: list[dict[str, Any]] | None, items: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The records a stored response adds beside its turn (unscoped keys)."""
    out: dict[str, dict[str, Any]] = {}
    if transcript is not None and len(json_codec.dumps(transcript)) <= MAX_TRANSCRIPT_BYTES:
        out[f"resp:{response_id}"] = {"messages": transcript}
    for item in items:
        if isinstance(item.get("id"), str):
            out[f"item:{item['id']}"] = {"item": item}
    return out
