"""Run bytes through the real repair pipeline in-process, and read what comes out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson

from proxy.repair.answer import AnswerMachine
from proxy.repair.conformance import stream_chunks
from proxy.repair.pipeline import RepairChain
from proxy.repair.tally import Tally
from proxy.server.answer_stream import answer_events
from proxy.server.doors.chat import ChatRendering
from proxy.settings.schema import Settings
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

    return asyncio.run(chat_stream(upstream(), chain, tally or Tally("test")))


async def chat_stream(
    upstream: AsyncIterator[bytes], chain: RepairChain, tally: Tally | None = None
) -> bytes:
    """What the chat door sends a client for `upstream`'s body, through `chain`: the server's
    own stream loop, answer machine and chat rendering. A stream that breaks off fails the
    test."""
    tally = tally or Tally("test")

    def abort(exc: Exception) -> tuple[str, str]:
        raise AssertionError(f"stream aborted: {exc!r}")

    machine = AnswerMachine(chain, tally, None)
    parts = answer_events(upstream, machine, ChatRendering(tally, debug=False), abort)
    return b"".join([part async for part in parts])


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
