"""`role` once per choice."""

from __future__ import annotations

from proxy.chunks import choice_index, choices_of, says_nothing
from proxy.pipeline import Chunk, Repair


class SingleRoleRepair(Repair):
    """Gemini repeats `role: "assistant"` on many deltas; OpenAI's SDK concatenates every
    string field it accumulates and ends up with `"assistantassistant"`. Keep `role` only on
    each choice's first delta. A chunk that carried nothing but the repeated role (after the
    tool-call repair took its fragment) goes entirely: it would reach the client as an empty
    delta, one useless event per fragment. Recording: `gemini_indexless_call_stop`.
    """

    def __init__(self) -> None:
        self._started: set[int] = set()

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        changed = False
        for choice in choices_of(chunk):
            index = choice_index(choice)
            delta = choice.get("delta")
            if index in self._started:
                if isinstance(delta, dict) and "role" in delta:
                    del delta["role"]
                    changed = True
            elif isinstance(delta, dict) and delta:
                self._started.add(index)
        if not changed:
            return None
        return [] if says_nothing(chunk) else [chunk]
