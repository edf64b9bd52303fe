"""The events of one output item, for every kind from its `ItemKind` (output_items.py), and
the numbering every event of a response shares.

One writer serves every kind: `opened` (the item added, a text kind's part opened), `delta`,
`closed` (the done event with the whole value, the part closed, the item done). Deltas name the
item id, never the call id; the item in `added` and in `done` is the same id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.fronts.responses.output_items import Item, Shaped
from proxy.wire import json_codec


class EventWriter:
    """Encodes a response's events as SSE, `sequence_number` rising from 0."""

    def __init__(self) -> None:
        self._sequence = 0

    def event(self, kind: str, **fields: Any) -> bytes:
        return self._encoded({"type": kind, "sequence_number": self._sequence, **fields})

    def _encoded(self, event: dict[str, Any]) -> bytes:
        self._sequence += 1
        kind: str = event["type"]
        return b"event: " + kind.encode() + b"\ndata: " + json_codec.dumps(event) + b"\n\n"

    # ── one output item ─────────────────────────────────────────────────────

    def added(self, item: Item, token: str | None) -> bytes:
        shaped = item.kind.shape(item, token)
        return self.event("response.output_item.added", output_index=item.index, item=shaped)

    def item_done(self, item: Item, token: str | None) -> bytes:
        shaped = item.kind.shape(item, token)
        return self.event("response.output_item.done", output_index=item.index, item=shaped)

    def opened(self, item: Item, token: str | None) -> list[bytes]:
        """The item added and, for a text kind, its (empty) part."""
        out = [self.added(item, token)]
        part = item.kind.part
        if part is not None:
            out.append(self._part(part.added, part.shape, item, ""))
        return out

    def delta(self, item: Item, text: str) -> bytes:
        kind = item.kind  # the hot path: built as a literal, not through keywords
        return self._encoded(
            {
                "type": kind.delta_event,
                "sequence_number": self._sequence,
                "item_id": item.id,
                "output_index": item.index,
                **kind.place,
                "delta": text,
                **kind.trailer,
            }
        )

    def closed(self, item: Item, token: str | None) -> list[bytes]:
        """Everything after the last delta: the whole value, the part, the item done."""
        kind = item.kind
        text = item.joined()
        value = kind.final(text)
        out: list[bytes] = []
        if not kind.streams and value:
            out.append(self.delta(item, value))
        out.append(
            self.event(
                kind.done_event,
                item_id=item.id,
                output_index=item.index,
                **kind.place,
                **{kind.done_field: value},
                **kind.trailer,
            )
        )
        if kind.part is not None:
            out.append(self._part(kind.part.done, kind.part.shape, item, text))
        out.append(self.item_done(item, token))
        return out

    def _part(self, name: str, shape: Callable[[str], Shaped], item: Item, text: str) -> bytes:
        return self.event(
            name, item_id=item.id, output_index=item.index, **item.kind.place, part=shape(text)
        )
