"""What the family tests share: the `Case` a family's markup is pinned by, and the markers
several families' cases spell (DeepSeek's fullwidth bars and U+2581 separators)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.repair.markup.spans import MarkupFamily, ParsedCall

DS_CALLS = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
DS_CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
DS_CALL = "<\uff5ctool\u2581call\u2581begin\uff5c>"
DS_CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
DS_SEP = "<\uff5ctool\u2581sep\uff5c>"
DSML = "\uff5cDSML\uff5c"

PARIS = {"city": "Paris"}


@dataclass(frozen=True)
class Case:
    id: str
    family: MarkupFamily
    opener: str
    span: str
    name: str
    whole_after: str
    """The name is whole once the span shows this text (its first occurrence) entirely."""
    calls: list[ParsedCall]

    @property
    def name_at(self) -> int:
        return self.span.index(self.whole_after) + len(self.whole_after)
