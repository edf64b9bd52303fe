"""How many input tokens a chat request costs an upstream's model, learned from what it says.

A chat-completions upstream has no counting endpoint, but every answer reports the prompt it
read (`usage.prompt_tokens`). The proxy knows the size of the chat request that got it (the
compact JSON it encoded and sent), so each answer is one measure of this upstream and model's
tokens per byte of chat request. The ratio is kept per (upstream, model), in the learned rules'
memory (refusal_memory.py: Redis shares it between replicas, the memory store bounds it):
one small record each, the mean of the first `SMOOTHING` answers and then a moving average
with that weight, so one odd answer moves it by a quarter of its difference at most.

What uses it: `POST /v1/messages/count_tokens` (server/count_tokens.py), and the estimate the
Messages front puts in `message_start` before the upstream has said anything
(fronts/messages/events.py). Until an answer taught it, the ratio is the rule of thumb for
English text and JSON with BPE tokenizers: a token per four bytes.

Per byte, not per character: one answer gives one equation, which fixes one unknown. A request
of another make-up (CJK text, 3 bytes a character, is cheaper per byte than English) is counted
at the ratio of the requests it was learned from; Claude Code's requests, where a long system
prompt and the tool schemas weigh most, keep their make-up from one request to the next.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.learning.refusal_memory import MODEL_SHOWN, RefusalMemory
from proxy.store.protocol import Value
from proxy.wire.json_shapes import objects_in

MEMORY_KEY = "input_tokens:per_byte"
"""The record's name beside the refusal rules' (a `:`, which no parameter name has)."""
GUESS = 0.25
"""Tokens per byte before any answer said: a token per four bytes."""
SMOOTHING = 4
"""How many answers the ratio is the mean of before it becomes a moving average."""
MIN_BYTES = 1024
"""A smaller request teaches nothing: its chat template's own tokens (roles, the tools'
framing) weigh too much beside its text."""
LOWEST, HIGHEST = 0.02, 1.0
"""Tokens per byte no text has: a measure outside is not learned from (a usage report that
counts something else, an image the byte count does not see)."""
STEADY = 0.01
"""A ratio learned from `SMOOTHING` answers is written again only when an answer moves it by
more than this share: most exchanges then write nothing."""


@dataclass(frozen=True, slots=True)
class TokenRatio:
    """Tokens per byte of chat request, and how many answers it was learned from (0: the
    guess)."""

    tokens_per_byte: float
    answers: int

    @property
    def learned(self) -> bool:
        return self.answers > 0

    def estimate(self, size: int) -> int:
        """Tokens for a chat request of `size` bytes: rounded up, never 0 for a request."""
        return max(1, math.ceil(size * self.tokens_per_byte)) if size > 0 else 0

    def after(self, measured: float) -> TokenRatio:
        """The ratio with one more answer's measure in it."""
        answers = min(self.answers + 1, SMOOTHING)
        if not self.learned:
            return TokenRatio(measured, 1)
        ratio = self.tokens_per_byte + (measured - self.tokens_per_byte) / answers
        return TokenRatio(ratio, answers)

    def said(self) -> str:
        """How a count was made, for `x-streamfix-token-count`."""
        if not self.learned:
            return "estimate"
        return f"learned; tokens_per_byte={self.tokens_per_byte:.4f}; answers={self.answers}"

    def value(self, model: object) -> Value:
        # `status` as an answer rule's, so `streamfix config` lists it as answered.
        return {
            "tokens_per_byte": self.tokens_per_byte,
            "answers": self.answers,
            "status": 200,
            "model": str(model)[:MODEL_SHOWN],
        }

    @staticmethod
    def of(value: Mapping[str, Any] | None) -> TokenRatio | None:
        """A stored record read back; None when absent or not one this module wrote."""
        if value is None:
            return None
        ratio, answers = value.get("tokens_per_byte"), value.get("answers")
        if not isinstance(ratio, float) or not LOWEST <= ratio <= HIGHEST:
            return None
        if not isinstance(answers, int) or isinstance(answers, bool) or answers < 1:
            return None
        return TokenRatio(ratio, min(answers, SMOOTHING))


GUESSED = TokenRatio(GUESS, 0)


def measure(prompt_tokens: int | None, sent_bytes: int | None) -> float | None:
    """One answer's tokens per byte, or None when it teaches nothing."""
    if not prompt_tokens or not sent_bytes or sent_bytes < MIN_BYTES:
        return None
    ratio = prompt_tokens / sent_bytes
    return ratio if LOWEST <= ratio <= HIGHEST else None


def carries_images(body: Mapping[str, Any]) -> bool:
    """Whether a chat request has an image part: the upstream counts an image by its pixels,
    not by the bytes of its URL or base64, so its prompt says nothing of the text's ratio."""
    for message in objects_in(body.get("messages")):
        for part in objects_in(message.get("content")):
            if part.get("type") == "image_url":
                return True
    return False


class TokenRatios:
    """The ratios, in the learned rules' memory (one entry per upstream and model)."""

    def __init__(self, memory: RefusalMemory) -> None:
        self.memory = memory

    async def recall(self, identity: str, model: object) -> TokenRatio | None:
        found = await self.memory.recall_values(identity, model, [MEMORY_KEY])
        return TokenRatio.of(found.get(MEMORY_KEY))

    def learn(
        self,
        identity: str,
        body: Mapping[str, Any],
        before: TokenRatio | None,
        prompt_tokens: int | None,
        sent_bytes: int | None,
    ) -> TokenRatio | None:
        """After an answer to `body` (`sent_bytes` as sent) that reported `prompt_tokens`: the
        ratio with it, remembered when it changed; None when the answer teaches nothing.
        `before` is what the exchange recalled, so replicas average each other's answers."""
        measured = measure(prompt_tokens, sent_bytes)
        if measured is None:
            return None
        before = before or GUESSED
        after = before.after(measured)
        moved = abs(after.tokens_per_byte - before.tokens_per_byte)
        if before.answers >= SMOOTHING and moved <= STEADY * before.tokens_per_byte:
            return before  # steady: nothing to write, most exchanges' case
        if carries_images(body):
            return None
        model = body.get("model")
        key = self.memory.key(identity, model, MEMORY_KEY)
        self.memory.store.put_later({key: after.value(model)})
        return after
