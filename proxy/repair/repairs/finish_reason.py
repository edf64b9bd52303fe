"""Exactly one, correct finish per choice."""

from __future__ import annotations

from typing import Any

from proxy.repair.chunks import choice_index, choices_of, envelope, new_chunk
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.tally import Tally


class FinishReasonRepair(Link):
    """Gemini (and vLLM with a named `tool_choice`) ends a tool-call turn with "stop"; opencode
    then ends its agent loop after running the tools. Some upstreams repeat the finish or end
    without one, and the Vercel AI SDK 3.x then fails with `Response stream ended without a
    finish reason.` This repair rewrites "stop" to "tool_calls" for a choice that sent calls,
    says "stop" when every call was left out, drops repeated finishes, and supplies a missing
    finish when the upstream ended cleanly. After a choice's finish, a repeated finish and an
    empty delta (MiniMax's second finish chunk, OpenRouter's usage chunk) are emptied, the
    chunk kept for its usage.
    Recordings: `gemini_indexless_call_stop`, `vllm_named_tool_choice_stop`, `openai_no_done`,
    `minimax_duplicated_finish`, `snowflake_null_tool_calls_no_finish`.
    """

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self._with_calls: set[int] = set()
        self._seen: set[int] = set()
        self._finished: set[int] = set()
        self._envelope: dict[str, Any] = {}

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        changed = False
        for choice in choices_of(chunk):
            index = choice_index(choice)
            if index in self._finished:
                changed |= self._quiet_after_finish(choice)
                continue
            self._seen.add(index)
            delta = choice.get("delta")
            if isinstance(delta, dict) and delta.get("tool_calls"):
                self._with_calls.add(index)
            reason = choice.get("finish_reason")
            if reason is None:
                continue
            if reason == "stop" and index in self._with_calls:
                changed = self._rewrite(choice, "tool_calls")
            elif reason == "tool_calls" and index not in self._with_calls:
                # Every call was left out (no name could be known): nothing for the client to run.
                changed = self._rewrite(choice, "stop")
            self._finished.add(index)
        if not self._envelope and "choices" in chunk:
            self._envelope = envelope(chunk)
        return [chunk] if changed else None

    async def on_end(self) -> list[Chunk]:
        self._tally.count("finish_reason_added", len(self._seen - self._finished))
        return [
            new_chunk(
                self._envelope,
                {
                    "index": index,
                    "delta": {},
                    "finish_reason": "tool_calls" if index in self._with_calls else "stop",
                },
            )
            for index in sorted(self._seen - self._finished)
        ]

    def _rewrite(self, choice: dict[str, Any], reason: str) -> bool:
        choice["finish_reason"] = reason
        self._tally.count("finish_reason_rewritten")
        return True

    def _quiet_after_finish(self, choice: dict[str, Any]) -> bool:
        """A choice already finished: a second finish goes (MiniMax repeats the finish chunk,
        the second time with usage), and so does a delta that says nothing (`content: ""`,
        `role`: what OpenRouter and MiniMax put on the usage chunk after the finish). The chunk
        itself stays, for its usage. Real content after a finish is not ours to drop: it goes
        on as received."""
        changed = False
        if choice.get("finish_reason") is not None:
            choice["finish_reason"] = None
            self._tally.count("finish_reason_repeated_dropped")
            changed = True
        delta = choice.get("delta")
        if isinstance(delta, dict) and delta and all(_says_nothing(k, v) for k, v in delta.items()):
            choice["delta"] = {}
            self._tally.count("after_finish_delta_emptied")
            changed = True
        return changed


def _says_nothing(key: str, value: Any) -> bool:
    return key == "role" or value is None or value == "" or value == []
