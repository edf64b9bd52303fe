"""The answer watch: the last stream link, which reads the answer as the client gets it and
never changes it (its `on_chunk` always returns None, so every chunk goes on as the bytes it
came as). It fills the exchange's `AnswerFacts` (answer_facts.py), which the server's span and
token metrics read at the exchange's end.

Last in the chain because the span's finish reasons are the client's: after every repair (a
"stop" that FinishReasonRepair made "tool_calls" reads as "tool_calls"). A non-streamed answer
passes it too, as its one-event trip (one_event.py), `usage` included.

It runs on every chunk of every exchange, so each chunk costs it a few dict reads: the model
and id until both are seen, `usage`, and each choice's `finish_reason` (with the `usage`
Moonshot's streams put inside the finishing choice rather than beside `choices`).
"""

from __future__ import annotations

from typing import Any

from proxy.repair.answer_facts import AnswerFacts
from proxy.repair.chunks import choice_index
from proxy.repair.pipeline import Chunk, Link
from proxy.repair.tally import Tally


class AnswerWatch(Link):
    def __init__(self, tally: Tally) -> None:
        self.facts = tally.answer = AnswerFacts()
        self._naming = True
        """Still looking for the answer's model or id (every chunk repeats them)."""

    def on_chunk(self, chunk: Chunk) -> None:
        facts = self.facts
        if self._naming:
            self._names(chunk)
        usage = chunk.get("usage")
        # Null or absent on every chunk but one or two of a stream: one test for most chunks.
        if usage and isinstance(usage, dict):
            facts.take_usage(usage)
        choices = chunk.get("choices")
        if choices and isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict):
                    reason = choice.get("finish_reason")
                    if reason is not None and isinstance(reason, str):
                        facts.finishes[choice_index(choice)] = reason
                        if not usage:  # Moonshot streams its usage inside the finishing choice
                            inside = choice.get("usage")
                            if inside and isinstance(inside, dict):
                                facts.take_usage(inside)
        return None

    def on_whole(self, body: dict[str, Any]) -> None:
        """A non-streamed answer's finish reasons are the folded body's: its one-event trip
        reads a null finish as "stop", which the client never gets."""
        choices = body.get("choices")
        finishes: dict[int, str] = {}
        for choice in choices if isinstance(choices, list) else ():
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            if isinstance(reason, str):
                finishes[choice_index(choice)] = reason
        self.facts.finishes = finishes

    def _names(self, chunk: Chunk) -> None:
        facts = self.facts
        model: Any = chunk.get("model")
        if facts.model is None and isinstance(model, str) and model:
            facts.model = model
        answer_id: Any = chunk.get("id")
        if facts.id is None and isinstance(answer_id, str) and answer_id:
            facts.id = answer_id
        self._naming = facts.model is None or facts.id is None
