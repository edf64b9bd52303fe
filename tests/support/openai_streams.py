"""Streams shaped exactly as OpenAI's Chat Completions API sends them (field order, compact
JSON, the `obfuscation` padding, usage on a last chunk with no choices), for the tests that
check a valid stream crosses the proxy byte for byte."""

from __future__ import annotations

from typing import Any

import orjson

ENVELOPE = {
    "id": "chatcmpl-CrX4b8Yq1fGm0sT2",
    "object": "chat.completion.chunk",
    "created": 1764921600,
    "model": "gpt-4.1-2025-04-14",
    "service_tier": "default",
    "system_fingerprint": "fp_b3f1157249",
}
USAGE = {
    "prompt_tokens": 82,
    "completion_tokens": 18,
    "total_tokens": 100,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 0,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}


def _event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
    chunk = {**ENVELOPE, "choices": choices, **extra, "obfuscation": "Xq3v"}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def _stream(events: list[bytes], usage: bool) -> bytes:
    if usage:
        events.append(_event([], usage=USAGE))
    return b"".join(events) + b"data: [DONE]\n\n"


def text_stream(pieces: list[str], *, usage: bool = False) -> bytes:
    events = [_event([_choice({"role": "assistant", "content": "", "refusal": None})])]
    events += [_event([_choice({"content": piece})]) for piece in pieces]
    events.append(_event([_choice({}, "stop")]))
    return _stream(events, usage)


def call_stream(calls: list[tuple[str, str, list[str]]], *, usage: bool = False) -> bytes:
    """Calls as (id, name, argument fragments), one after another, as OpenAI streams parallel
    calls: an opening delta per call (the first with the role), then one delta per fragment."""
    events = []
    for index, (call_id, name, fragments) in enumerate(calls):
        opening = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        delta: dict[str, Any] = {"tool_calls": [opening]}
        if index == 0:
            delta = {"role": "assistant", "content": None, **delta, "refusal": None}
        events.append(_event([_choice(delta)]))
        events += [
            _event([_choice({"tool_calls": [{"index": index, "function": {"arguments": text}}]})])
            for text in fragments
        ]
    events.append(_event([_choice({}, "tool_calls")]))
    return _stream(events, usage)


def fragments_of(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
WRITE_TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}
