"""Correctness: one answer per stream kind from every target; streamfix's tool-call streams
must pass `proxy.repair.conformance.violations` and carry exactly the fake's calls."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from perf_fake import expected_calls

from proxy.repair.conformance import stream_chunks, violations
from proxy.settings.schema import ToolCallSettings

from .config import MODELS
from .load import LoadGenerator
from .servers import Target


def calls_in(body: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Calls assembled by index (as a client does), and the finish reasons."""
    calls: dict[int, dict[str, Any]] = {}
    finishes: list[str] = []
    for chunk in stream_chunks(body.encode()):
        if not isinstance(chunk, dict):
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            for entry in delta.get("tool_calls") or ():
                call = calls.setdefault(
                    entry.get("index", -1),
                    {"id": None, "name": None, "arguments": "", "signature": None},
                )
                call["id"] = call["id"] or entry.get("id")
                function = entry.get("function") or {}
                call["name"] = call["name"] or function.get("name")
                call["arguments"] += function.get("arguments") or ""
                google = (entry.get("extra_content") or {}).get("google") or {}
                call["signature"] = google.get("thought_signature") or call["signature"]
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
    return [calls[i] for i in sorted(calls)], finishes


EMIT = ToolCallSettings().emit
"""The emission the streamfix target runs with (its default config): with "auto" an OpenAI-shaped
call goes on in the fragments it came in, which "atomic"'s rules would count as a violation."""


def check_stream(kind: str, body: str) -> list[str]:
    """Problems of one streamed answer to a tool-call model, for any client."""
    problems = violations(body.encode(), EMIT)
    if problems:
        return problems
    calls, finishes = calls_in(body)
    expected = expected_calls(MODELS[kind])
    for call in [*calls, *expected]:
        with contextlib.suppress(ValueError, TypeError):
            call["arguments"] = json.loads(call["arguments"]) if call["arguments"] else None
    if calls != expected:
        problems.append(f"calls differ from the fake's: got {json.dumps(calls)[:300]}")
    if finishes != ["tool_calls"]:
        problems.append(f"finish reasons {finishes}, expected ['tool_calls']")
    return problems


def correctness(load: LoadGenerator, targets: list[Target], when: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    models = [[MODELS["gtools"], True], [MODELS["otools"], True], [MODELS["text"], True]]
    for target in targets:
        answer = load.run(
            {"job": "sample", "port": target.port, "timeout": 30, "models": models}, 120
        )
        bodies = answer["bodies"]
        entry: dict[str, Any] = {}
        for kind, sample in zip(("gtools", "otools"), bodies, strict=False):
            if sample["status"] != 200:
                entry[kind] = [f"status {sample['status']}: {sample['body'][:200]}"]
            else:
                entry[kind] = check_stream(kind, sample["body"])
        text = bodies[2]
        entry["text"] = (
            [] if text["status"] == 200 else [f"status {text['status']}: {text['body'][:200]}"]
        )
        out[target.name] = entry
    return {"when": when, "targets": out}
