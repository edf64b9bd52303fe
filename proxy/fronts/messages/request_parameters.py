"""A Messages request's parameters onto the chat request: sampling and stop sequences,
structured output (`output_config.format` or the beta's `output_format`), and `thinking` as
the upstream's `reasoning_effort`."""

from __future__ import annotations

from typing import Any

from proxy.fronts.messages.anthropic_errors import MessagesError
from proxy.fronts.messages.translated import Translated


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def map_sampling(body: dict[str, Any], chat: dict[str, Any]) -> None:
    """temperature and top_p as they are; top_k too (vLLM, OpenRouter and most local servers
    take it; an upstream that refuses it has it dropped by the parameter learning)."""
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            chat[name] = body[name]
    stops = body.get("stop_sequences")
    if stops:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise MessagesError("stop_sequences: must be a list of strings")
        chat["stop"] = stops


def map_output_format(body: dict[str, Any], chat: dict[str, Any]) -> bool:
    """Structured outputs (`output_config.format`, or the beta's top-level `output_format`):
    `{"type": "json_schema", "schema": ...}` becomes chat's `response_format` json_schema, so
    the answer is the JSON the client parses (Claude Code's session titles are; dropped, the
    upstream answers prose and the title comes back null). Returns whether one was read."""
    config = body.get("output_config")
    given = config.get("format") if isinstance(config, dict) else None
    where = "output_config.format"
    if given is None:
        given, where = body.get("output_format"), "output_format"
    if given is None:
        return False
    if (
        not isinstance(given, dict)
        or given.get("type") != "json_schema"
        or not isinstance(given.get("schema"), dict)
    ):
        raise MessagesError(f'{where}: must be {{"type": "json_schema", "schema": {{...}}}}')
    # Chat's json_schema needs a name; Anthropic's format has none. `strict` is left unset: an
    # upstream enforcing it refuses schemas that Anthropic accepts (optional properties).
    schema = {"name": "output", "schema": given["schema"]}
    chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    return True


def effort_for_budget(budget: int) -> str:
    """Anthropic's thinking budget as a chat reasoning effort: OpenAI's own mapping of budgets
    to efforts has no public table, so these are round cut points (1k-4k low, to 16k medium)."""
    if budget < 4096:
        return "low"
    if budget < 16384:
        return "medium"
    return "high"


def map_thinking(body: dict[str, Any], chat: dict[str, Any], out: Translated) -> None:
    """`thinking` as the upstream's `reasoning_effort`: a budget by `effort_for_budget`,
    adaptive thinking by `output_config.effort` (Claude Code's), disabled as nothing."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict):
        return
    kind = thinking.get("type")
    if kind == "enabled" and _is_int(thinking.get("budget_tokens")):
        chat["reasoning_effort"] = effort_for_budget(thinking["budget_tokens"])
    elif kind == "adaptive":
        config = body.get("output_config")
        effort = config.get("effort") if isinstance(config, dict) else None
        if effort in ("low", "medium", "high"):
            chat["reasoning_effort"] = effort
        elif effort == "max":
            chat["reasoning_effort"] = "high"
        else:
            out.count("thinking_dropped")
    elif kind != "disabled":
        out.count("thinking_dropped")
