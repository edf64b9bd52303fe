"""Stream side of receipts: building each turn's receipt fields from deltas, by merge rule."""

from __future__ import annotations

from typing import Any

from proxy.json_paths import get_path
from proxy.profiles import ReceiptRule

# In a `by_index` piece these grow by concatenation; every other field is taken as received.
_TEXT_FIELDS = ("text", "summary", "data")


class FieldBuilder:
    """One receipt field of one choice, fed from successive deltas."""

    def __init__(self, rule: ReceiptRule) -> None:
        self.rule = rule
        self._value: Any = None
        self._pieces: dict[Any, dict[str, Any]] = {}
        self._order: list[Any] = []

    def feed(self, source: dict[str, Any]) -> None:
        value = get_path(source, self.rule.path)
        if value is None:
            return
        if self.rule.merge == "concat" and isinstance(value, str):
            previous = self._value if isinstance(self._value, str) else ""
            self._value = previous + value
        elif self.rule.merge == "by_index" and isinstance(value, list):
            for piece in value:
                self._merge_piece(piece)
        else:
            self._value = value

    def value(self) -> Any:
        if self._order:
            return [self._pieces[key] for key in self._order]
        return self._value

    def _merge_piece(self, piece: Any) -> None:
        if not isinstance(piece, dict):
            return
        key = piece.get("index")
        if not isinstance(key, int | str) or isinstance(key, bool):
            key = ("unindexed", len(self._order))  # no usable index: a piece of its own
        if key not in self._pieces:
            self._pieces[key] = dict(piece)
            self._order.append(key)
            return
        entry = self._pieces[key]
        for name, value in piece.items():
            if name in _TEXT_FIELDS and isinstance(value, str) and isinstance(entry.get(name), str):
                entry[name] += value
            else:
                entry[name] = value
