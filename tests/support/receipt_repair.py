"""The receipt repairs driven directly: a harness with one memory store shared by successive
exchanges (as in the running proxy), and builders for the chunks, calls and histories they see.
The request side runs the receipt request repairs in their order (repairs/receipts.py); the
stream side is the capture link (repairs/receipt_capture.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from proxy.repair.forwarded import Forwarded
from proxy.repair.pipeline import RepairChain
from proxy.repair.repairs.receipt_capture import ReceiptCapture
from proxy.repair.repairs.receipts import (
    CurrentTurnPlaceholders,
    ForeignMetadataStripped,
    MissingReceiptsCounted,
    ReceiptLookup,
    ReceiptsRestored,
)
from proxy.repair.request_phase import RequestRepair, request_phase
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope
from proxy.store.memory_store import MemoryStore
from proxy.store.protocol import Store


def receipt_request_repairs(store: Store, placeholder: bool = True) -> list[RequestRepair]:
    """The receipt request repairs, in the order the default list runs them."""
    placeholders: list[RequestRepair] = [CurrentTurnPlaceholders()] if placeholder else []
    return [
        ReceiptLookup(store),
        ForeignMetadataStripped(),
        ReceiptsRestored(),
        *placeholders,
        MissingReceiptsCounted(),
    ]


def receipt_request(
    store: Store,
    rules: RouteRules,
    scope: ReceiptScope,
    body: dict[str, Any],
    placeholder: bool = True,
) -> Tally:
    """The receipt request repairs on `body` (edited in place); what they counted."""
    tally = Tally("r")
    repairs = receipt_request_repairs(store, placeholder)
    asyncio.run(request_phase(body, rules, scope, tally, repairs, strict=True))
    return tally


class Harness:
    """One store shared by successive exchanges, as in the running proxy."""

    def __init__(self, profile: Any, max_value_bytes: int = 1_048_576) -> None:
        self.store = MemoryStore(1000, 3600)
        self.profile = profile
        self.max_value_bytes = max_value_bytes

    def repair(
        self, messages: list | None = None, tenant: str = "t1", upstream: str = "u"
    ) -> tuple[ReceiptCapture, Tally]:
        sent = Forwarded(
            {"messages": messages or [{"role": "user", "content": "go"}]},
            RouteRules(self.profile),
            ReceiptScope(tenant, upstream),
        )
        tally = Tally("r")
        return ReceiptCapture(sent, tally, self.store, max_value_bytes=self.max_value_bytes), tally

    def stream(self, chunks: list[dict], **scope: Any) -> Tally:
        repair, tally = self.repair(**scope)
        for chunk in chunks:
            assert repair.on_chunk(copy.deepcopy(chunk)) is None  # capture never edits
        asyncio.run(repair.on_end())
        return tally

    def respond(self, body: dict, **scope: Any) -> Tally:
        repair, tally = self.repair(messages=scope.pop("messages", None), **scope)
        sent = copy.deepcopy(body)
        assert asyncio.run(RepairChain([repair], strict=True).on_response(body)) is False
        assert body == sent  # capture never edits
        return tally

    def request(
        self, messages: list[dict], tenant: str = "t1", upstream: str = "u"
    ) -> tuple[list, Tally]:
        body = {"messages": copy.deepcopy(messages)}
        rules, scope = RouteRules(self.profile), ReceiptScope(tenant, upstream)
        return body["messages"], receipt_request(self.store, rules, scope, body)


def delta_chunk(delta: dict, finish: str | None = None, index: int = 0) -> dict:
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def call(call_id: str, name: str = "read_file", index: int = 0) -> dict:
    return {
        "index": index,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": "{}"},
    }


def plain(call_id: str, name: str = "read_file") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def deepseek_stream(reasoning: list[str], *calls: dict, choice: int = 0) -> list[dict]:
    """As ReceiptRepair sees it (after ToolCallRepair): reasoning pieces, then whole calls."""
    chunks = [delta_chunk({"role": "assistant", "reasoning_content": ""}, index=choice)]
    chunks += [delta_chunk({"reasoning_content": p}, index=choice) for p in reasoning]
    chunks += [delta_chunk({"tool_calls": [c]}, index=choice) for c in calls]
    chunks.append(delta_chunk({"content": "", "reasoning_content": None}, "tool_calls", choice))
    return chunks


def history(*calls: dict, question: str = "read a.txt", **fields: Any) -> list[dict]:
    step = {"role": "assistant", "content": "", **fields, "tool_calls": list(calls)}
    results = [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
    return [{"role": "user", "content": question}, step, *results]
