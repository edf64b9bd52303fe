"""A repaired chat stream folded into the chat completion it says, for a client that asked for
one answer of an upstream that streamed anyway (some gateways and local servers stream
whatever `stream` says).

The chunks folded are the repaired ones, out of the stream links: each call whole and indexed,
finishes as the client gets them. The fold is what a client accumulating the stream would
hold: per choice its text fields joined, its calls merged by index, its first other values, the
last finish; the answer's id, model and creation time from the first chunk that names them, and
the last `usage` the stream reported. Nothing is invented: a choice that said no finish has a
null one, a stream without usage gives none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from proxy.repair.chunks import choice_index
from proxy.repair.one_event import MergedDeltas


def folded_completion(chunks: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The completion the chunks say; None when no chunk carried a choice."""
    head: dict[str, Any] = {}
    merged: dict[int, MergedDeltas] = {}
    finishes: dict[int, Any] = {}
    usage: Any = None
    for chunk in chunks:
        for key in ("id", "created", "model", "system_fingerprint"):
            if key not in head and chunk.get(key) is not None:
                head[key] = chunk[key]
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            index = choice_index(choice)
            deltas = merged.setdefault(index, MergedDeltas())
            delta = choice.get("delta")
            if isinstance(delta, dict):
                deltas.add(delta)
            if choice.get("finish_reason") is not None:
                finishes[index] = choice["finish_reason"]
    if not merged:
        return None
    completion: dict[str, Any] = {"id": head.get("id"), "object": "chat.completion"}
    completion.update({k: head[k] for k in ("created", "model", "system_fingerprint") if k in head})
    completion["choices"] = [
        {
            "index": index,
            "message": _message(merged[index]),
            "finish_reason": finishes.get(index),
        }
        for index in sorted(merged)
    ]
    if usage is not None:
        completion["usage"] = usage
    return completion


def _message(deltas: MergedDeltas) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", **deltas.fields}
    message.setdefault("content", None)
    if deltas.calls:
        message["tool_calls"] = [
            {key: value for key, value in call.items() if key != "index"}
            for call in deltas.calls.values()
        ]
    return message
