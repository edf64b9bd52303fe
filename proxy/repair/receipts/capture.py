"""Stream side of receipts: building each turn's receipt fields from deltas, by merge rule.

Texts grow from many small deltas (DeepSeek sends its reasoning a few characters at a time, tens
of thousands of pieces for a long answer). Growing a string by `+=` copies it whole every time,
quadratic in the number of pieces, and it runs on the event loop: 40,000 pieces took seconds
and stalled every other request. So pieces are collected in lists and joined once, when the
value is asked for.
"""

from __future__ import annotations

from typing import Any

from proxy.repair.profiles import ReceiptRule
from proxy.wire.json_paths import get_path

# In a `by_index` piece these grow by concatenation; every other field is taken as received.
_TEXT_FIELDS = ("text", "summary", "data")


class FieldBuilder:
    """One receipt field of one choice, fed from successive deltas. Past `limit` characters of
    text it holds nothing more and is `oversized`: such a receipt would not be stored anyway
    (`receipts.max_value_bytes`), and the evidence profile watches every stream, so an
    upstream streaming endless reasoning must not grow the proxy with it."""

    def __init__(self, rule: ReceiptRule, limit: int | None = None) -> None:
        self.rule = rule
        self.limit = limit
        self.oversized = False
        self._size = 0
        self._value: Any = None
        # `concat`: the text pieces so far, or None while the value is not text.
        self._text: list[str] | None = None
        self._pieces: dict[Any, dict[str, Any]] = {}
        self._order: list[Any] = []
        # `by_index`: index -> the key of the newest detail at that index.
        self._newest: dict[Any, Any] = {}
        # `by_index`: (piece key, field) -> text pieces not yet joined into the piece.
        self._growing: dict[tuple[Any, str], list[str]] = {}

    def feed(self, source: dict[str, Any]) -> None:
        value = get_path(source, self.rule.path)
        if value is None or self.oversized:
            return
        if self.limit is not None:
            self._size += _text_size(value)
            if self._size > self.limit:
                self._drop()
                return
        if self.rule.merge == "concat" and isinstance(value, str):
            if self._text is None:  # text after nothing or after a non-text value starts anew
                self._text = []
            self._text.append(value)
        elif self.rule.merge == "by_index" and isinstance(value, list):
            for piece in value:
                self._merge_piece(piece)
        else:
            self._text = None
            self._value = value

    def _drop(self) -> None:
        self.oversized = True
        self._value = self._text = None
        self._pieces.clear()
        self._order.clear()
        self._newest.clear()
        self._growing.clear()

    def value(self) -> Any:
        if self._order:
            self._join_pieces()
            return [self._pieces[key] for key in self._order]
        if self._text is not None:
            joined = "".join(self._text)
            self._text = [joined]  # asked again, or fed more: no second join of the same text
            return joined
        return self._value

    def _merge_piece(self, piece: Any) -> None:
        if not isinstance(piece, dict):
            return
        key = self._detail_of(piece)
        if key not in self._pieces:
            self._pieces[key] = dict(piece)
            self._order.append(key)
            return
        entry = self._pieces[key]
        for name, value in piece.items():
            self._merge_field(key, entry, name, value)

    def _detail_of(self, piece: dict[str, Any]) -> Any:
        """The detail a piece belongs to: its index and its type. Two details may share an
        index (OpenRouter relaying Grok streams `reasoning.summary` pieces at index 0, then a
        `reasoning.encrypted` one also at index 0; Vercel's AI Gateway relaying Gemini 3 does
        the same with `reasoning.text`): the upstream issued two, and wants two back. A piece
        without a type continues the newest detail at its index."""
        index = piece.get("index")
        if not isinstance(index, int | str) or isinstance(index, bool):
            return ("unindexed", len(self._order))  # no usable index: a piece of its own
        kind = piece.get("type")
        if not isinstance(kind, str):
            return self._newest.get(index, (index, None))
        key = (index, kind)
        self._newest[index] = key
        return key

    def _merge_field(self, key: Any, entry: dict[str, Any], name: str, value: Any) -> None:
        """Text fields grow (their pieces kept aside until joined); others are replaced."""
        growing = self._growing.get((key, name))
        if name in _TEXT_FIELDS and isinstance(value, str):
            if growing is not None:
                growing.append(value)
                return
            if isinstance(entry.get(name), str):
                self._growing[(key, name)] = [entry[name], value]
                return
        if growing is not None:
            del self._growing[(key, name)]
        entry[name] = value

    def _join_pieces(self) -> None:
        for (key, name), parts in self._growing.items():
            self._pieces[key][name] = "".join(parts)
        self._growing.clear()


def _text_size(value: Any) -> int:
    """Characters of text a delta's field adds: a string, or the text fields of its pieces."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(
            len(text)
            for piece in value
            if isinstance(piece, dict)
            for name in _TEXT_FIELDS
            if isinstance(text := piece.get(name), str)
        )
    return 0
