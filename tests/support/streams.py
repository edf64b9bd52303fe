"""Run bytes through the real repair pipeline in-process, and read what comes out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx
import orjson

from proxy.repair.conformance import stream_chunks
from proxy.repair.pipeline import repaired_stream
from proxy.repair.tally import Tally
from proxy.settings.schema import Settings
from proxy.wire.sse import SSEDecoder
from tests.support.phases import forwarded, phases


def repair_stream(
    raw: bytes,
    request: dict[str, Any] | None = None,
    *,
    emit: str = "atomic",
    pieces: Iterable[bytes] | None = None,
    tally: Tally | None = None,
) -> bytes:
    """Repair an upstream SSE body (optionally delivered as `pieces`) with a strict chain built
    for `request` (as forwarded: no request repair runs on it), counting on `tally`."""
    settings = Settings().with_values({"tool_calls.emit": emit})
    sent = forwarded(dict(request or {"messages": []}))
    chain = phases(settings).stream(sent, tally or Tally("test"))

    async def upstream() -> AsyncIterator[bytes]:
        for piece in pieces if pieces is not None else [raw]:
            yield piece

    async def run() -> bytes:
        def abort(exc: Exception) -> bytes:
            raise AssertionError(f"stream aborted: {exc!r}")

        parts = [
            part
            async for part in repaired_stream(
                upstream(), chain, SSEDecoder(), (httpx.HTTPError,), abort
            )
        ]
        return b"".join(parts)

    return asyncio.run(run())


def assembled_calls(body: bytes) -> dict[int, list[dict[str, Any]]]:
    """Tool calls per choice, accumulated the way OpenAI's SDK does (by index)."""
    calls: dict[int, dict[int, dict[str, Any]]] = {}
    for item in stream_chunks(body):
        if not isinstance(item, dict):
            continue
        for choice in item.get("choices") or ():
            for entry in (choice.get("delta") or {}).get("tool_calls") or ():
                call = calls.setdefault(choice.get("index", 0), {}).setdefault(
                    entry["index"], {"id": "", "name": "", "arguments": "", "extra_content": None}
                )
                call["id"] += entry.get("id") or ""
                function = entry.get("function") or {}
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
                if entry.get("extra_content"):
                    call["extra_content"] = entry["extra_content"]
    return {choice: [by_index[i] for i in sorted(by_index)] for choice, by_index in calls.items()}


def finish_reasons(body: bytes) -> dict[int, list[str]]:
    reasons: dict[int, list[str]] = {}
    for item in stream_chunks(body):
        if isinstance(item, dict):
            for choice in item.get("choices") or ():
                if choice.get("finish_reason") is not None:
                    reasons.setdefault(choice.get("index", 0), []).append(choice["finish_reason"])
    return reasons


def content(body: bytes) -> dict[int, str]:
    text: dict[int, str] = {}
    for item in stream_chunks(body):
        if isinstance(item, dict):
            for choice in item.get("choices") or ():
                piece = (choice.get("delta") or {}).get("content")
                if isinstance(piece, str):
                    text[choice.get("index", 0)] = text.get(choice.get("index", 0), "") + piece
    return text


def reasoning(body: bytes, field: str = "reasoning_content") -> dict[int, str]:
    """The text of one reasoning field per choice, as a client accumulates it."""
    text: dict[int, str] = {}
    for item in stream_chunks(body):
        if isinstance(item, dict):
            for choice in item.get("choices") or ():
                piece = (choice.get("delta") or {}).get(field)
                if isinstance(piece, str):
                    index = choice.get("index", 0)
                    text[index] = text.get(index, "") + piece
    return text


def sse(*chunks: dict[str, Any] | str) -> bytes:
    """An SSE body from chunks (`"[DONE]"` for the terminator)."""
    return b"".join(
        b"data: " + (c.encode() if isinstance(c, str) else orjson.dumps(c)) + b"\n\n"
        for c in chunks
    )
