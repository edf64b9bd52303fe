"""Helpers for the events tests: build a translation, run chunks, parse the SSE bytes."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.fronts.responses.events import CLEAN, End, ResponsesEvents
from proxy.fronts.responses.request import Translation


def translation(custom: frozenset[str] = frozenset(), **namespaced: tuple[str, str]) -> Translation:
    return Translation(
        chat={"model": "m"},
        stream=True,
        store=True,
        model="m",
        custom_tools=custom,
        namespaced=dict(namespaced),
    )


def parse(raw: list[bytes]) -> list[dict[str, Any]]:
    events = []
    for block in raw:
        head, data = block.split(b"\ndata: ", 1)
        event = orjson.loads(data)
        assert head == b"event: " + event["type"].encode()
        assert block.endswith(b"\n\n")
        events.append(event)
    return events


def run(
    chunks: list[dict[str, Any]],
    end: End = CLEAN,
    token: str | None = "sf1.tok",
    custom: frozenset[str] = frozenset(),
    **namespaced: tuple[str, str],
) -> tuple[ResponsesEvents, list[dict[str, Any]]]:
    events = ResponsesEvents(translation(custom, **namespaced), {"model": "m"}, token=token)
    raw: list[bytes] = []
    for chunk in chunks:
        raw += events.feed(chunk)
    raw += events.finish(end)
    return events, parse(raw)


def delta(
    finish: str | None = None, usage: dict[str, Any] | None = None, **fields: Any
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": fields, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def call(
    index: int, id_: str | None = None, name: str | None = None, arguments: str = "", **extra: Any
) -> dict[str, Any]:
    piece: dict[str, Any] = {"index": index, "function": {"arguments": arguments}, **extra}
    if id_:
        piece["id"] = id_
        piece["type"] = "function"
    if name:
        piece["function"]["name"] = name
    return piece


USAGE = {
    "prompt_tokens": 10,
    "completion_tokens": 5,
    "total_tokens": 15,
    "prompt_tokens_details": {"cached_tokens": 2},
    "completion_tokens_details": {"reasoning_tokens": 3},
}
