"""What a Responses request's translation hands on: the chat request, and what the events
translator and the store write need to know of it (which tools were custom or flattened from a
namespace, the instructions put first, what the bridge did). And what it reads: the store's
lookups."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]
Item = dict[str, Any]

NAMESPACE_SEPARATOR = "__"
"""A namespace's member is offered to the chat upstream as `namespace__name`."""
CUSTOM_INPUT = "input"
"""A custom tool is offered as a function of this one string argument."""


async def _no_summary(key: str) -> str | None:
    return None


@dataclass
class Lookups:
    """What the translation reads from the store (store.py's ResponsesStore in the server; plain
    functions in the tests)."""

    transcript: Callable[[str], Awaitable[list[Message] | None]]
    turn: Callable[[str], Awaitable[Message | None]]
    items: Callable[[list[str]], Awaitable[dict[str, Item]]]
    token_scope: str = ""
    summary: Callable[[str], Awaitable[str | None]] = _no_summary
    """A compaction's summary by its store key (compaction.py)."""


@dataclass
class Translation:
    """The chat request, and what the events translator and the store write need to know."""

    chat: dict[str, Any]
    stream: bool
    store: bool
    model: str
    instructions: Message | None = None
    custom_tools: frozenset[str] = frozenset()
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Flattened name -> (namespace, name)."""
    compacting: bool = False
    """The input ended with Codex's `compaction_trigger`: the answer is one compaction item."""
    files: list[str] = field(default_factory=list)
    """Where the request's `input_file` parts are (`input[0].content[1]`): named should the
    upstream refuse chat's `file` parts."""
    counts: dict[str, int] = field(default_factory=dict)
    """What the bridge did, by repair kind (booked on the exchange)."""

    def count(self, kind: str, amount: int = 1) -> None:
        if amount:
            self.counts[kind] = self.counts.get(kind, 0) + amount

    def transcript_without_instructions(self, messages: list[Message]) -> list[Message]:
        """`messages` (what went upstream) without the `instructions` this request put first.
        By value: the request repairs may have rebuilt the list (and its messages)."""
        if self.instructions is not None and messages and messages[0] == self.instructions:
            return messages[1:]
        return list(messages)
