"""One request rule a refusal can call for (refusal_rules.py holds them all, as data): the
route key it sets and to what, the statuses and texts of the refusal that calls for it, and
what a request must carry for it to apply. Learned, it changes the route's rules
(`adjust`); the request phase then runs that key's repair again, as it would configured.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from proxy.learning.error_messages import error_messages
from proxy.repair.profiles import MessageRules
from proxy.repair.rules import RouteRules

Request = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RequestRule:
    """One request rule and the refusal that calls for it."""

    key: str
    """The route key it sets (a name of `LEARNABLE_KEYS`)."""
    value: str
    """What it sets the key to, as the config file spells it."""
    statuses: frozenset[int]
    """The statuses the refusal comes with; any other answer is never read for it."""
    said: tuple[re.Pattern[str], ...]
    """The refusal's texts: any one, found in a message of the error body, calls for it."""
    carries: Callable[[Request], bool]
    """Whether the request holds what the rule changes: without it the refusal is not this
    one's, and a request without it has nothing to look up."""
    named: Callable[[Request, int], bool] | None = None
    """For a text that names the message it refuses (a pattern's group `at`, its index):
    whether that message holds what the rule changes. A text naming another message is not
    this rule's refusal (it may be the next rule's)."""

    @property
    def remembers(self) -> bool:
        """A request rule holds for the upstream and model: always remembered."""
        return True

    @property
    def kind(self) -> str:
        """Counted and logged when learned (`schema_dialect_learned`)."""
        return f"{self.key}_learned"

    @property
    def memory_key(self) -> str:
        """What is remembered per upstream and model: `key:value`, a `:` no parameter has."""
        return f"{self.key}:{self.value}"

    @property
    def done(self) -> str:
        return (
            f'calling for {self.key} = "{self.value}" (%s); sent once more with it, and applied '
            "up front for this upstream and model"
        )

    def learns(self, rules: RouteRules) -> bool:
        """Whether the route left the key "auto" and does not apply this value already."""
        return self.key in rules.learnable and _value(rules, self.key) != self.value

    def says(self, messages: Iterable[str], request: Request) -> bool:
        for message in messages:
            for pattern in self.said:
                found = pattern.search(message)
                if found is None:
                    continue
                named = self.named
                if (
                    named is None
                    or "at" not in pattern.groupindex
                    or named(request, int(found["at"]))
                ):
                    return True
        return False

    def detect(self, error: str, request: Request) -> tuple[str, ...]:
        called = self.carries(request) and self.says(error_messages(error), request)
        return (self.memory_key,) if called else ()

    def apply(self, body: dict[str, Any], keys: Iterable[str]) -> bool:
        """A request repair's rule: the request phase builds the resend (`adjust`), not this."""
        return False

    def candidates(self, request: Request) -> list[str]:
        return [self.memory_key] if self.carries(request) else []

    def adjust(self, rules: RouteRules, keys: frozenset[str]) -> RouteRules:
        if self.memory_key not in keys:
            return rules
        change: dict[str, Any] = {self.key: self.value}
        if self.key in _MESSAGE_KEYS:
            return replace(rules, messages=replace(rules.messages, **change))
        return replace(rules, **change)


_MESSAGE_KEYS = frozenset(MessageRules.__dataclass_fields__)


def _value(rules: RouteRules, key: str) -> str:
    holder: object = rules.messages if key in _MESSAGE_KEYS else rules
    return str(getattr(holder, key))
