"""Tool-call arguments that reach the end of a stream broken in a way that can be undone."""

from __future__ import annotations

import json
from collections.abc import Sequence

_DECODER = json.JSONDecoder()


class ArgumentMender:
    """vLLM's tool parsers under load let one delta close call N and open call N+1, so the
    tail of call N's arguments arrives under N+1 (`{"city": "Par` / `is"}{"city": "Tokyo"}`):
    both fail to parse and clients drop or error on both. Leaked text only ever moves forward
    across a boundary, so the concatenated arguments still split into exactly one JSON value
    per call; when they do, each call gets its value back. Empty arguments become `"{}"`.
    Anything else is left exactly as received: nothing is invented.
    Applied by ToolCallRepair to a choice's calls before they are sent (atomic emission).
    Transcript and recording: `vllm_args_tail_under_next_index`.
    """

    def repair(self, arguments: Sequence[str]) -> list[str] | None:
        """The repaired arguments, or None when there is nothing (certain) to repair."""
        fixed = ["{}" if not text.strip() else text for text in arguments]
        if all(_parses(text) for text in fixed):
            return fixed if fixed != list(arguments) else None
        split = _split_forward(fixed)
        if split is not None:
            return split
        return fixed if fixed != list(arguments) else None


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _split_forward(arguments: list[str]) -> list[str] | None:
    """One JSON value per call from the concatenated text, each boundary moved only forward."""
    joined = "".join(arguments)
    values: list[str] = []
    position = 0
    received_end = 0
    for text in arguments:
        received_end += len(text)
        while position < len(joined) and joined[position].isspace():
            position += 1
        try:
            _, end = _DECODER.raw_decode(joined, position)
        except ValueError:
            return None
        if end < received_end and len(values) < len(arguments) - 1:
            return None  # the value would end before its own text does: not a forward leak
        values.append(joined[position:end])
        position = end
    if joined[position:].strip():
        return None  # text left over: the split does not account for everything received
    return values
