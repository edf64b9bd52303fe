"""MaxTokensClamped: a completion budget over the route's limit goes up as the limit, by either
name; one under it, or a route without a limit, is left as sent."""

from __future__ import annotations

from typing import Any

from proxy.repair.repairs.max_tokens import CLAMPED_KIND, MaxTokensClamped
from proxy.repair.rules import RouteRules
from tests.support.phases import apply

LIMITED = RouteRules(max_tokens_limit=8192)
USER = {"role": "user", "content": "hi"}


def clamped(body: dict[str, Any], rules: RouteRules = LIMITED) -> tuple[bool, dict[str, int]]:
    changed, context = apply(MaxTokensClamped(), body, rules)
    return changed, dict(context.tally.repairs)


def test_a_budget_over_the_limit_goes_up_as_the_limit_by_either_name() -> None:
    body = {"model": "m", "messages": [USER], "max_tokens": 32000, "max_completion_tokens": 64000}
    assert clamped(body) == (True, {CLAMPED_KIND: 1})
    assert (body["max_tokens"], body["max_completion_tokens"]) == (8192, 8192)


def test_a_budget_under_the_limit_a_flag_or_none_is_left_as_sent() -> None:
    for body in (
        {"model": "m", "messages": [USER], "max_tokens": 8192},
        {"model": "m", "messages": [USER], "max_tokens": 100, "max_completion_tokens": None},
        {"model": "m", "messages": [USER], "max_tokens": True},
        {"model": "m", "messages": [USER]},
    ):
        before = dict(body)
        assert clamped(body) == (False, {})
        assert body == before
    body = {"model": "m", "messages": [USER], "max_tokens": 32000}
    assert clamped(body, RouteRules()) == (False, {})  # no limit: as sent
    assert body["max_tokens"] == 32000
