"""The rules learned from an upstream's answers rather than its refusals: the wire shows the
fact after one answer, so a route left "auto" needs no key.

A chat template that writes `<think>` itself (Qwen3's, DeepSeek-R1's on a server run without
its reasoning parser) leaves only `</think>` in the content. TextReasoningRepair leaves a close
nothing opened as content, once (`reasoning_close_unopened`); this rule remembers it for that
upstream and model, in the refusals' memory with its TTL, and from the next request on the
route's `think_opened_by_template` is true for them, so the reasoning goes to its field.

An entry of `refusals.RULES`, recalled like the refusal rules; it has no refusal of its own
(no statuses, nothing detected in an error): the server tells it an exchange ended
(`RefusalLearning.answered`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from proxy.repair.rules import RouteRules

UNOPENED_CLOSE = "reasoning_close_unopened"
"""The count TextReasoningRepair makes of a `</think>` nothing opened: what the answer shows."""


class TemplateOpensThink:
    """`think_opened_by_template`, learned from an answer whose `</think>` had no opener."""

    key = "think_opened_by_template"
    memory_key = "think_opened_by_template:true"
    """A `:` no parameter name has, as the request rules' keys."""
    kind = "think_opened_by_template_learned"
    statuses: frozenset[int] = frozenset()
    """No refusal calls for it: the seam never reads an error for it."""
    remembers = True
    done = (
        "with a </think> nothing opened, so the chat template opens the block: "
        "think_opened_by_template = true (%s), applied to later answers from this upstream "
        "and model"
    )

    def shows(self, repairs: Mapping[str, int]) -> bool:
        """Whether an exchange's counts show the fact."""
        return repairs.get(UNOPENED_CLOSE, 0) > 0

    def learns(self, rules: RouteRules) -> bool:
        """Whether the route left the key "auto" and reads text reasoning without it yet."""
        markup = rules.markup
        return (
            self.key in rules.learnable
            and markup.text_reasoning
            and not (markup.think_opened_by_template)
        )

    def detect(self, error: str, request: Mapping[str, Any]) -> tuple[str, ...]:
        return ()

    def apply(self, body: dict[str, Any], keys: Iterable[str]) -> bool:
        return False

    def candidates(self, request: Mapping[str, Any]) -> list[str]:
        return [self.memory_key]

    def adjust(self, rules: RouteRules, keys: frozenset[str]) -> RouteRules:
        if self.memory_key not in keys:
            return rules
        return replace(rules, markup=replace(rules.markup, think_opened_by_template=True))


TEMPLATE_OPENS_THINK = TemplateOpensThink()
