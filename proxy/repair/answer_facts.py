"""What the upstream said about its own answer, as the client received it: the model that
answered, the completion's id, each choice's finish reason, and the token usage the upstream
reported. Read off the answer by the answer watch (answer_watch.py) for the exchange's span and
token metrics; nothing here is ever estimated, and nothing here changes the answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.wire.json_shapes import integer


@dataclass(slots=True)
class AnswerFacts:
    model: str | None = None
    """The answer's `model`: the model that generated it, which may name a version the
    request did not (`gpt-4o` answered by `gpt-4o-2024-08-06`)."""
    id: str | None = None
    """The answer's `id` (`chatcmpl-…`)."""
    finishes: dict[int, str] = field(default_factory=dict)
    """Each choice's finish reason by choice index, the last one the client was sent."""
    input_tokens: int | None = None
    """`usage.prompt_tokens`, cached tokens included, when the upstream reported usage."""
    output_tokens: int | None = None
    """`usage.completion_tokens`, reasoning tokens included."""
    cached_input_tokens: int | None = None
    """`usage.prompt_tokens_details.cached_tokens`: the input served from the provider's cache."""
    reasoning_tokens: int | None = None
    """`usage.completion_tokens_details.reasoning_tokens`."""

    @property
    def finish_reasons(self) -> list[str]:
        """The finish reasons in choice order, one per choice that finished."""
        return [self.finishes[index] for index in sorted(self.finishes)]

    @property
    def reported_usage(self) -> bool:
        return self.input_tokens is not None or self.output_tokens is not None

    def take_usage(self, usage: dict[str, Any]) -> None:
        """The upstream's `usage` object. The last one counts: an upstream that reports usage
        on every chunk (Gemini's OpenAI endpoint) reports running totals, and a field the last
        report lacks keeps what an earlier one said."""
        self.input_tokens = _tokens(usage.get("prompt_tokens"), self.input_tokens)
        self.output_tokens = _tokens(usage.get("completion_tokens"), self.output_tokens)
        prompt_details = usage.get("prompt_tokens_details")
        if isinstance(prompt_details, dict):
            cached = prompt_details.get("cached_tokens")
            self.cached_input_tokens = _tokens(cached, self.cached_input_tokens)
        completion_details = usage.get("completion_tokens_details")
        if isinstance(completion_details, dict):
            reasoning = completion_details.get("reasoning_tokens")
            self.reasoning_tokens = _tokens(reasoning, self.reasoning_tokens)


def _tokens(value: Any, earlier: int | None) -> int | None:
    """A token count as reported: a non-negative JSON integer, else what was known before."""
    count = integer(value)
    return count if count is not None and count >= 0 else earlier
