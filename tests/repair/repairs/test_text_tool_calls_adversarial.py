"""Adversarial streams through the whole strict chain (which raises on any repair exception):
every recognised call reaches the client whole, with an index, an id, a type and a name, ids
unique, the finish `tool_calls` (unless cut by length), and the body conformant."""

from __future__ import annotations

import orjson

from proxy.repair.conformance import stream_chunks, violations
from tests.repair.markup.test_recogniser import CALL, REQUEST
from tests.support.streams import assembled_calls, content, finish_reasons, repair_stream, sse

ENVELOPE = {"id": "chatcmpl-a", "object": "chat.completion.chunk", "created": 1, "model": "m"}
OSLO = CALL.replace("Paris", "Oslo")


def chunk(*choices: dict) -> dict:
    return {**ENVELOPE, "choices": list(choices)}


def choice(index: int = 0, finish: str | None = None, **delta: object) -> dict:
    return {"index": index, "delta": dict(delta), "finish_reason": finish}


def stream(*chunks: dict) -> bytes:
    return sse(chunk(choice(role="assistant", content="")), *chunks, "[DONE]")


def call_entries(body: bytes) -> list[dict]:
    """Every tool_calls entry as the client receives it, in order."""
    return [
        entry
        for item in stream_chunks(body)
        if isinstance(item, dict)
        for part in item.get("choices") or ()
        for entry in (part.get("delta") or {}).get("tool_calls") or ()
    ]


def assert_whole_calls(body: bytes) -> None:
    """Each call arrives in one entry with index, id, type, name and parseable arguments."""
    entries = call_entries(body)
    for entry in entries:
        assert isinstance(entry["index"], int) and entry["id"] and entry["type"] == "function"
        assert entry["function"]["name"] and isinstance(
            orjson.loads(entry["function"]["arguments"]), dict
        )
    ids = [entry["id"] for entry in entries]
    assert len(set(ids)) == len(ids)
    assert violations(body) == []


def test_a_finish_chunk_without_a_delta_still_ends_the_text_before_it() -> None:
    """Some servers send the last chunk as `{"index": 0, "finish_reason": "stop"}`, no delta:
    text held back (a partial opener) and the calls must come before that finish, not after."""
    body = repair_stream(
        stream(
            chunk(choice(content=CALL[:20])),
            chunk(choice(content=CALL[20:] + "\nok <")),
            chunk({"index": 0, "finish_reason": "stop"}),
        ),
        REQUEST,
    )
    assert [c["name"] for c in assembled_calls(body)[0]] == ["get_weather"]
    assert content(body) == {0: "ok <"}
    assert finish_reasons(body) == {0: ["tool_calls"]}
    assert_whole_calls(body)
