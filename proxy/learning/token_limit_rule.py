"""One refusal of a request's completion budget (`max_tokens`, `max_completion_tokens`) that
says how much would have been taken (refusal_rules.py holds them all, as data): the number is
read out of the refusal, the one resend goes with the budget lowered to it, and a limit of the
model's own is remembered per upstream and model (`max_tokens_limit=8192`), which the request
phase then applies up front (MaxTokensClamped), as it would the key configured.

A budget is only ever lowered: a refusal whose number is not below what the request asked is
not this one's, and one that repeats the request's value (`is too large: 64000`) must repeat
this request's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from proxy.learning.error_messages import error_messages
from proxy.learning.refusal_memory import VALUE_SEPARATOR, key_name
from proxy.repair.repairs.max_tokens import budgets, clamp
from proxy.repair.rules import RouteRules

KEY = "max_tokens_limit"
"""The route key these rules read and a remembered limit sets."""


@dataclass(frozen=True, slots=True)
class TokenLimitRule:
    """A refusal that names the most completion tokens the upstream takes, or the room its
    context leaves this prompt."""

    kind: str
    """Counted and logged when it calls for a resend."""
    name: str
    """Its memory key's name; the key carries the number (`max_tokens_limit=8192`)."""
    statuses: frozenset[int]
    """The statuses the refusal comes with; any other answer is never read for it."""
    said: tuple[re.Pattern[str], ...]
    """The refusal's texts, each with the number in named groups: `limit` (the most the model
    takes), or `context` and `prompt` (its context and this prompt's length: the room left is
    the difference); `asked` where the text repeats the request's budget."""
    remembers: bool
    """Whether the number holds for the model (its output limit), or for this prompt only."""
    done: str
    """The log line's account, `%s` receiving the key."""

    def detect(self, error: str, request: Mapping[str, Any]) -> tuple[str, ...]:
        asked = budgets(request)
        if not asked:
            return ()
        for message in error_messages(error):
            for pattern in self.said:
                match = pattern.search(message)
                allowed = _allowed(match, set(asked.values())) if match else None
                if allowed is not None and allowed < max(asked.values()):
                    return (f"{self.name}{VALUE_SEPARATOR}{allowed}",)
        return ()

    def learns(self, rules: RouteRules) -> bool:
        """Whether the route left `max_tokens_limit` "auto"."""
        return KEY in rules.learnable

    def apply(self, body: dict[str, Any], keys: Iterable[str]) -> bool:
        limit = _number(keys, self.name)
        return limit is not None and clamp(body, limit)

    def candidates(self, request: Mapping[str, Any]) -> list[str]:
        return [self.name] if self.remembers and budgets(request) else []

    def adjust(self, rules: RouteRules, keys: frozenset[str]) -> RouteRules:
        limit = _number(keys, self.name) if self.remembers else None
        if limit is None:
            return rules
        if rules.max_tokens_limit:
            limit = min(limit, rules.max_tokens_limit)
        return replace(rules, max_tokens_limit=limit)


def _allowed(match: re.Match[str], asked: set[int]) -> int | None:
    """The budget the refusal allows, or None when it does not speak of this request (it
    repeats another budget, or leaves no room at all)."""
    found = match.groupdict()
    if found.get("asked") is not None and int(found["asked"]) not in asked:
        return None
    if found.get("limit") is not None:
        allowed = int(found["limit"])
    else:
        allowed = int(found["context"]) - int(found["prompt"])
    return allowed if allowed >= 1 else None


def _number(keys: Iterable[str], name: str) -> int | None:
    for key in keys:
        value = key.partition(VALUE_SEPARATOR)[2]
        if key_name(key) == name and value.isdigit():
            return int(value)
    return None
