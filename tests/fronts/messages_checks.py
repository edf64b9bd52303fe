"""What Anthropic's clients require of a Messages event stream (shared/MESSAGES.md), as one
check every front test runs over what it produced."""

from __future__ import annotations

import json
import re
from typing import Any

TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")
"""Anthropic's `tool_use.id` (and `tool_result.tool_use_id`) pattern: a transcript with any
other id is refused when it goes to Anthropic's API."""


def parse(stream: bytes) -> list[dict[str, Any]]:
    """The events of an SSE body; each event's name must match its data's `type`."""
    events = []
    for frame in stream.decode().split("\n\n"):
        if not frame.strip():
            continue
        lines = frame.split("\n")
        assert lines[0].startswith("event: "), frame
        data = json.loads(lines[1].removeprefix("data: "))
        assert data["type"] == lines[0].removeprefix("event: "), frame
        events.append(data)
    return events


def violations(events: list[dict[str, Any]], *, complete: bool = True) -> list[str]:
    found: list[str] = []
    kinds = [e["type"] for e in events if e["type"] != "ping"]
    if not kinds or kinds[0] != "message_start" or kinds.count("message_start") != 1:
        found.append("not exactly one message_start, first")
    started: dict[int, str] = {}
    open_index: int | None = None
    stopped: set[int] = set()
    inputs: dict[int, str] = {}
    fitting = {
        "text": {"text_delta", "citations_delta"},
        "tool_use": {"input_json_delta"},
        "thinking": {"thinking_delta", "signature_delta"},
    }
    for event in events:
        kind = event["type"]
        if kind == "content_block_start":
            index = event["index"]
            if index != len(started) or open_index is not None:
                found.append(f"block {index} starts out of order or interleaved")
            started[index] = event["content_block"]["type"]
            open_index = index
            if started[index] == "tool_use":
                block = event["content_block"]
                if not block.get("id") or not block.get("name"):
                    found.append(f"tool_use block {index} without id or name")
                elif not TOOL_USE_ID.fullmatch(block["id"]):
                    found.append(f"tool_use block {index}: id outside Anthropic's alphabet")
                inputs[index] = ""
        elif kind == "content_block_delta":
            index = event["index"]
            if index != open_index:
                found.append(f"delta for block {index}, which is not open")
            elif event["delta"]["type"] not in fitting[started[index]]:
                found.append(f"{event['delta']['type']} in a {started[index]} block")
            elif event["delta"]["type"] == "input_json_delta":
                inputs[index] += event["delta"]["partial_json"]
        elif kind == "content_block_stop":
            if event["index"] != open_index:
                found.append(f"stop for block {event['index']}, which is not open")
            stopped.add(event["index"])
            open_index = None
        elif kind == "message_delta":
            if open_index is not None:
                found.append("message_delta with a block open")
            if event["delta"]["stop_reason"] not in (
                "end_turn",
                "tool_use",
                "max_tokens",
                "stop_sequence",
                "pause_turn",
                "refusal",
            ):
                found.append("bad stop_reason")
            has_tool = "tool_use" in started.values()
            if has_tool != (event["delta"]["stop_reason"] == "tool_use"):
                found.append("stop_reason tool_use and tool_use blocks disagree")
            if not isinstance(event["usage"]["output_tokens"], int):
                found.append("usage.output_tokens not a number")
    for index, text in inputs.items():
        if text and not isinstance(json.loads(text), dict):
            found.append(f"tool_use block {index}: input not one JSON object")
    if complete:
        if kinds.count("message_delta") != 1 or kinds[-1:] != ["message_stop"]:
            found.append("not one message_delta, then message_stop last")
        if kinds.count("message_stop") != 1:
            found.append("not exactly one message_stop")
    else:
        if "message_delta" in kinds or "message_stop" in kinds:
            found.append("an unfinished stream ends as if it were whole")
        if kinds[-1:] != ["error"]:
            found.append("an unfinished stream does not end with an error event")
    return found
