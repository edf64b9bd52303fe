"""A completion budget larger than the upstream takes, sent as the most it takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.repair.request_phase import RequestContext, RequestRepair

CLAMPED_KIND = "max_tokens_clamped"

BUDGET_PARAMETERS = ("max_tokens", "max_completion_tokens")
"""The chat request's completion budget, by either name (the Responses front sends its
`max_output_tokens`, the Messages front its `max_tokens`, as `max_tokens`)."""


def budgets(request: Mapping[str, Any]) -> dict[str, int]:
    """The request's completion budgets that are counts, by name."""
    return {
        name: value
        for name in BUDGET_PARAMETERS
        if isinstance(value := request.get(name), int) and not isinstance(value, bool)
    }


def clamp(body: dict[str, Any], limit: int) -> bool:
    """Every budget in `body` over `limit` set to it (never one raised); True when one was."""
    over = [name for name, value in budgets(body).items() if value > limit]
    for name in over:
        body[name] = limit
    return bool(over)


class MaxTokensClamped(RequestRepair):
    """Upstreams refuse a whole request whose `max_tokens` passes the model's output limit,
    before generating anything: DeepSeek 400 "Invalid max_tokens value, the valid range of
    max_tokens is [1, 8192]" (deepseek-ai/DeepSeek-V3#69), OpenAI "max_tokens is too large:
    64000. This model supports at most 16384 completion tokens" (ChatGPTNextWeb/NextChat#3195),
    Groq, DashScope, Volcengine, Ollama Cloud in their words. Claude Code asks 32000 or 64000 on
    every turn (through the Messages front), so every turn fails. With the route's
    `max_tokens_limit` (learned from that refusal, proxy/learning/refusal_rules.py, or set),
    `max_tokens` and `max_completion_tokens` above it go up as it, counted
    `max_tokens_clamped`; a smaller value is never raised. The answer then ends at the limit
    with the finish reason "length" where it would have gone on: what the upstream gives."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        limit = context.rules.max_tokens_limit
        if limit < 1 or not clamp(body, limit):
            return False
        context.tally.count(CLAMPED_KIND)
        return True
