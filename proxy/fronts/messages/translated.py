"""What a Messages request's translation hands on: the chat request, and what it decided on
the way (counts, the receipt keys thinking signatures carried, the stop sequences a
`stop_sequence` stop may name, where its PDFs went)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ReadToken = Callable[[str], str | None]
"""A thinking block's signature -> the receipt key it carries, None when foreign or tampered
(receipt_tokens.read bound to the exchange's scope)."""


@dataclass
class Translated:
    """The chat request and what the translation decided on the way."""

    body: dict[str, Any]
    stream: bool
    model: str
    counts: dict[str, int] = field(default_factory=dict)
    receipt_keys: dict[int, str] = field(default_factory=dict)
    """Chat message position -> the receipt key its thinking block's signature carried."""
    stop_sequences: list[str] = field(default_factory=list)
    """What `stop_reason: "stop_sequence"` may name."""
    documents: list[str] = field(default_factory=list)
    """Where each `document` block sent as a chat `file` part is (`messages.0.content.1`), to
    name it should the upstream refuse the part."""

    def count(self, kind: str, amount: int = 1) -> None:
        if amount:
            self.counts[kind] = self.counts.get(kind, 0) + amount

    @property
    def chat(self) -> dict[str, Any]:
        """The chat request (the name every front's translation gives it)."""
        return self.body

    def receipt_messages(self) -> list[tuple[dict[str, Any], str]]:
        """(assistant message, receipt key) for every thinking signature read back."""
        messages = self.body["messages"]
        return [(messages[position], key) for position, key in self.receipt_keys.items()]
