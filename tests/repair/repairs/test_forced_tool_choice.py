"""ForcedToolChoiceRepair: a forced tool choice goes up as "auto", or without the thinking
parameters beside it, only when the route says so and the request thinks."""

from __future__ import annotations

from typing import Any

from proxy.repair.repairs.forced_tool_choice import (
    THINKING_LEFT_OUT_KIND,
    UNFORCED_KIND,
    ForcedToolChoiceRepair,
)
from proxy.repair.rules import RouteRules
from tests.support.phases import apply

NAMED = {"type": "function", "function": {"name": "StructuredOutput"}}


def forced(choice: Any = NAMED, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "StructuredOutput"}}],
        "tool_choice": choice,
        **extra,
    }


def repaired(body: dict[str, Any], how: str) -> tuple[bool, dict[str, int]]:
    changed, context = apply(ForcedToolChoiceRepair(), body, RouteRules(forced_tool_choice=how))
    return changed, dict(context.tally.repairs)


def test_unforced_sends_auto_and_keeps_the_thinking() -> None:
    for choice in (NAMED, "required"):
        body = forced(choice, reasoning_effort="high")
        assert repaired(body, "unforced") == (True, {UNFORCED_KIND: 1})
        assert body == forced("auto", reasoning_effort="high")
    body = forced()  # DeepSeek V4 thinks with nothing asking
    assert repaired(body, "unforced") == (True, {UNFORCED_KIND: 1})


def test_without_thinking_keeps_the_choice_and_leaves_out_every_thinking_parameter() -> None:
    body = forced(
        reasoning_effort="high",
        reasoning={"effort": "high"},
        thinking={"type": "enabled"},
        enable_thinking=True,
    )
    assert repaired(body, "without_thinking") == (True, {THINKING_LEFT_OUT_KIND: 1})
    assert body == forced()
    nothing_to_leave = forced()
    assert repaired(nothing_to_leave, "without_thinking") == (False, {})


def test_a_request_that_forces_nothing_or_turns_thinking_off_is_left_as_sent() -> None:
    for body in (
        forced("auto", reasoning_effort="high"),
        forced("none"),
        forced(thinking={"type": "disabled"}),
        forced(enable_thinking=False),
        forced(reasoning_effort="none"),
        forced(chat_template_kwargs={"enable_thinking": False}),
    ):
        before = dict(body)
        for how in ("unforced", "without_thinking", "as_sent"):
            assert repaired(body, how) == (False, {})
        assert body == before
    body = forced(reasoning_effort="high")
    assert repaired(body, "as_sent") == (False, {})
