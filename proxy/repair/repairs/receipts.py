"""Request side of receipts: what a provider attached to an assistant turn, put back on the
follow-ups that need it, and what another provider attached, kept away.

Providers hand out data with an assistant turn and reject the next request without it: Gemini's
thought signature on each tool call (`400 Function call is missing a thought_signature`),
DeepSeek's `reasoning_content` on tool-calling turns (`400 The reasoning_content in the thinking
mode must be passed back to the API.`), OpenRouter's `reasoning_details`. Almost every client
drops them (the Vercel AI SDK files them under a custom provider's name; OpenAI SDK users
rebuild messages without them). ReceiptCapture (receipt_capture.py) keeps them from the answers;
the request repairs here, in this order, follow the profile's rules:

1. ReceiptLookup reads the store once for every call and turn that could carry a receipt;
2. ForeignMetadataStripped removes what another provider issued (kept where the store says this
   upstream issued it, so it needs the lookup);
3. ReceiptsRestored puts the stored receipts back verbatim on the exact call or message;
4. CurrentTurnPlaceholders fills Google's documented placeholder for current-turn steps nobody
   can sign (only with `[receipts] on_missing = "placeholder"`);
5. MissingReceiptsCounted counts required receipts still missing, once everything was put back.

A request without any credential has no tenant: it gets no receipts (counted once,
`receipts_skipped_no_credential`), since a shared bucket would hand them to every keyless
client. A request without an assistant turn has nothing any of them could change but foreign
metadata, and they return at once.
"""

from __future__ import annotations

from typing import Any

from proxy.repair.receipts import injection
from proxy.repair.request_phase import RequestContext, RequestRepair
from proxy.store.protocol import Store


class ReceiptLookup(RequestRepair):
    """The one store read of an exchange: the stored receipts of every call and turn in the
    history that could carry one, for the receipt repairs after it. Changes nothing."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        profile, scope = context.rules.profile, context.scope
        messages = body.get("messages")
        if not isinstance(messages, list) or not profile.keeps_receipts:
            return False
        if not scope.keeps_receipts:
            context.tally.count("receipts_skipped_no_credential")
            return False
        if not _has_assistant(messages):
            return False
        keys = injection.receipt_keys(messages, profile)
        stored = await self._store.get_many([scope.key(k) for k in keys]) if keys else {}
        context.receipts_found = {
            key: stored[scoped] for key in keys if (scoped := scope.key(key)) in stored
        }
        return False


class ForeignMetadataStripped(RequestRepair):
    """A chat that switched models mid-way carries metadata another provider issued (Google's
    `extra_content` signatures), which a strict upstream rejects. It is removed, unless the
    profile keeps it where this very upstream issued it (the lookup found it)."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return False
        profile = context.rules.profile
        removed = injection.strip_foreign(messages, profile, context.receipts_found)
        context.tally.count("foreign_metadata_removed", removed)
        return removed > 0


class ReceiptsRestored(RequestRepair):
    """Stored receipts put back verbatim on exactly the call or message they came with: a value
    the client dropped is injected, one it sent back altered (OpenAI's SDK concatenates the
    string fields of `reasoning_details` pieces) goes up as the upstream issued it."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        messages = body.get("messages")
        if not context.receipts_found or not isinstance(messages, list):
            return False
        injected, restored = injection.inject(
            messages, context.rules.profile, context.receipts_found
        )
        for kind, amount in injected.items():
            context.tally.count(f"{kind}_injected", amount)
        for kind, amount in restored.items():
            context.tally.note(
                f"{kind}_restored", "%d sent back altered; the issued value goes upstream", amount
            )
        return sum(injected.values()) + sum(restored.values()) > 0


class CurrentTurnPlaceholders(RequestRepair):
    """Gemini validates the current turn, where the first call of every step must carry its
    thought signature: a step no one can sign (another model's, a client that lost it) gets the
    placeholder Google documents for it, so the request is not refused."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        placeholder = context.rules.profile.first_call_placeholder
        messages = body.get("messages")
        if placeholder is None or not isinstance(messages, list):
            return False
        put = injection.fill_current_turn(messages, context.rules.profile)
        if put:
            kind = f"{placeholder.kind}_placeholders"
            context.tally.note(kind, "%d current-turn step(s) had no receipt", put)
        return put > 0


class MissingReceiptsCounted(RequestRepair):
    """DeepSeek refuses a tool turn without its `reasoning_content`: a required receipt still
    missing once everything was put back is counted and logged (never invented), so an operator
    sees why the upstream refuses. Changes nothing."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        profile = context.rules.profile
        messages = body.get("messages")
        if not isinstance(messages, list) or not profile.requires_receipts:
            return False
        for kind, amount in injection.missing_required(messages, profile).items():
            context.tally.note(f"{kind}_missing", "%d tool turn(s) without it", amount)
        return False


def _has_assistant(messages: list[Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages)
