"""Turn receipts keyed by the token a stateless client carries back, for every front.

A Responses client echoes a reasoning item's `encrypted_content`, an Anthropic client a
thinking block's `signature`, byte for byte. Either holds a receipt token
(fronts/receipt_tokens.py) naming `turn:{answer id}`: the repaired assistant chat message of
that answer, its receipts attached (Gemini's signatures on the message and on each call,
`reasoning_content`, `reasoning_details`), kept in the store (proxy/store/; so Redis
shares it between replicas, under the store's TTL), scoped per tenant and upstream. On the
follow-up the front reads the token back and puts the turn's receipts on the assistant message
it arrived with; the receipts' own keys (call ids, text hashes) still apply after it,
but a turn they cannot name (a text-only DeepSeek turn, a turn with reasoning and no text)
comes back by the token alone.

The runner writes the turn before the answer's terminal event (server/front_exchange.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.fronts import receipt_tokens
from proxy.repair.profiles import ReceiptRule
from proxy.repair.receipts.capture import FieldBuilder
from proxy.repair.tenancy import ReceiptScope
from proxy.store.protocol import Store

Message = dict[str, Any]

_DETAILS = ReceiptRule("reasoning_details", ("reasoning_details",), "tool_turn", "by_index")
_NOT_RECEIPTS = frozenset({"role", "content", "tool_calls", "refusal", "function_call"})
_CALL_OWN = frozenset({"index", "id", "type", "function"})


def turn_key(answer_id: str) -> str:
    """The store key a token names: one answer's turn."""
    return f"turn:{answer_id}"


class _Pieces(list[str]):
    """A text receipt growing from deltas, joined once."""

    def __str__(self) -> str:
        return "".join(self)


class TurnReceipts:
    """The message-level receipts of a streamed assistant turn: every field its deltas carry
    beside the text and the calls. Reasoning text grows piece by piece, `reasoning_details`
    pieces merge by index and type as the receipt repairs merge them, anything else (Gemini's
    `extra_content`) is kept as last sent."""

    def __init__(self) -> None:
        self._fields: dict[str, Any] = {}

    def __bool__(self) -> bool:
        return bool(self._fields)

    def feed(self, delta: dict[str, Any]) -> None:
        for name, value in delta.items():
            if name in _NOT_RECEIPTS:
                continue
            if name in ("reasoning_content", "reasoning") and isinstance(value, str):
                pieces = self._fields.get(name)
                if not isinstance(pieces, _Pieces):
                    pieces = self._fields[name] = _Pieces()
                pieces.append(value)
            elif name == "reasoning_details" and isinstance(value, list):
                details = self._fields.get(name)
                if not isinstance(details, FieldBuilder):
                    details = self._fields[name] = FieldBuilder(_DETAILS)
                details.feed(delta)
            elif value is not None:
                self._fields[name] = value

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in self._fields.items():
            if isinstance(value, FieldBuilder):
                value = value.value()
            out[name] = str(value) if isinstance(value, _Pieces) else value
        return out


def call_extras(call: Mapping[str, Any]) -> dict[str, Any]:
    """A call delta's fields beside its id, type and function (Gemini's signature)."""
    return {
        name: value for name, value in call.items() if name not in _CALL_OWN and value is not None
    }


def restore(message: Message, stored: Message) -> int:
    """Put a stored turn's receipts on the message the client sent back: every field the
    upstream added beside content and calls (reasoning_content, reasoning_details,
    extra_content...), and each call's own extra fields (Gemini's signature), by call id.
    What the client sent is kept; returns how many fields were put."""
    put = 0
    for name, value in stored.items():
        if name in ("role", "content", "tool_calls") or value in (None, "", []):
            continue
        if message.get(name) in (None, "", []):
            message[name] = value
            put += 1
    sent = {c.get("id"): c for c in message.get("tool_calls") or () if isinstance(c, dict)}
    for call in stored.get("tool_calls") or ():
        target = sent.get(call.get("id")) if isinstance(call, dict) else None
        if target is None:
            continue
        for name, value in call.items():
            if name not in _CALL_OWN and name not in target:
                target[name] = value
                put += 1
    return put


async def restore_turns(
    pairs: list[tuple[Message, str]], lookup: Callable[[str], Awaitable[Message | None]]
) -> tuple[int, int]:
    """Each (message, receipt key) restored from its stored turn: (fields put, keys whose turn
    is gone: TTL, eviction)."""
    put = unknown = 0
    for message, key in pairs:
        stored = await lookup(key)
        if stored is None:
            unknown += 1
        else:
            put += restore(message, stored)
    return put, unknown


@dataclass(frozen=True, slots=True)
class TurnStore:
    """The fronts' view of the store (proxy/store/) for one tenant on one upstream."""

    store: Store
    scope: ReceiptScope

    @property
    def usable(self) -> bool:
        """A request without a credential has no tenant: nothing is kept or read for it."""
        return self.scope.keeps_receipts

    @property
    def token_scope(self) -> str:
        """What a receipt token is bound to: this tenant on this upstream ("" without one)."""
        return self.scope.key("") if self.usable else ""

    def mint(self, key: str) -> str:
        """A token naming `key` for this scope. Without a tenant it names nothing kept (a
        front whose clients drop an unsigned block still signs it)."""
        return receipt_tokens.mint(self._bound_to(), key)

    def read(self, token: str) -> str | None:
        """The key a token minted for this scope names; None for a foreign, tampered or
        garbage one."""
        return receipt_tokens.read(token, self._bound_to())

    def _bound_to(self) -> str:
        return self.token_scope or f"-:{self.scope.upstream}:"

    async def turn(self, key: str) -> Message | None:
        found = await self.get(key)
        message = found.get("message") if found else None
        return message if isinstance(message, dict) else None

    async def keep(
        self, answer_id: str, message: Message | None, extra: Mapping[str, dict[str, Any]]
    ) -> bool:
        """Keep an answer's turn (when it has one) and a front's `extra` records (unscoped
        keys), in one write. False when the backend failed or nothing could be kept."""
        if not self.usable:
            return False
        records = {self.scope.key(key): value for key, value in extra.items()}
        if message is not None:
            records[self.scope.key(turn_key(answer_id))] = {"message": message}
        return bool(records) and await self.store.put_many(records)

    async def get(self, key: str) -> dict[str, Any] | None:
        if not self.usable:
            return None
        full = self.scope.key(key)
        return (await self.store.get_many([full])).get(full)
