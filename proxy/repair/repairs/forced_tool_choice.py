"""A forced `tool_choice` an upstream refuses in thinking mode: sent as "auto", or sent with the
request's thinking parameters left out, as the route's `forced_tool_choice` says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.repair.request_phase import RequestContext, RequestRepair

UNFORCED_KIND = "tool_choice_unforced"
THINKING_LEFT_OUT_KIND = "thinking_dropped_for_tool_choice"

THINKING_PARAMETERS = ("reasoning_effort", "reasoning", "thinking", "enable_thinking")
"""The chat request's ways of asking for thinking: OpenAI's `reasoning_effort` (what the
Messages front sends for Anthropic's `thinking`), OpenRouter's `reasoning`, DeepSeek's, Kimi's
and Anthropic's `thinking` object, DashScope's `enable_thinking`."""

_OFF = ("none", "disabled", False)
"""The values that turn thinking off (`reasoning_effort: "none"`, `thinking: {"type":
"disabled"}`, `enable_thinking: false`): a request saying one does not think."""


def forces_a_tool(request: Mapping[str, Any]) -> bool:
    """Whether the request's `tool_choice` forces a call: "required", a named function, or an
    `allowed_tools` choice in "required" mode."""
    choice = request.get("tool_choice")
    if choice == "required":
        return True
    if not isinstance(choice, dict):
        return False
    if choice.get("type") == "function":
        return True
    allowed = choice.get("allowed_tools")
    return isinstance(allowed, dict) and allowed.get("mode") == "required"


def _says_off(value: Any) -> bool:
    if isinstance(value, dict):
        return any(value.get(name) in _OFF for name in ("type", "effort", "enabled"))
    return value in _OFF


def turns_thinking_off(request: Mapping[str, Any]) -> bool:
    """Whether the request says not to think (then a forced tool choice is what it wants, and
    upstreams that think by default take it)."""
    kwargs = request.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False:
        return True
    return any(name in request and _says_off(request[name]) for name in THINKING_PARAMETERS)


def thinking_asked(request: Mapping[str, Any]) -> list[str]:
    """The request's parameters that ask for thinking, in `THINKING_PARAMETERS` order."""
    return [
        name
        for name in THINKING_PARAMETERS
        if name in request and request[name] is not None and not _says_off(request[name])
    ]


def forces_a_tool_thinking(request: Mapping[str, Any]) -> bool:
    """A forced tool choice in a request that does not turn thinking off (DeepSeek V4 and Kimi
    think by default: no parameter needs to ask)."""
    return forces_a_tool(request) and not turns_thinking_off(request)


def forces_a_tool_asking_thinking(request: Mapping[str, Any]) -> bool:
    """A forced tool choice beside a parameter that asks for thinking, which can be left out."""
    return forces_a_tool(request) and bool(thinking_asked(request))


class ForcedToolChoiceRepair(RequestRepair):
    """Thinking models behind several upstreams refuse a forced tool choice, before generating
    anything: DashScope (Qwen) 400 "The tool_choice parameter does not support being set to
    required or object in thinking mode" (cloudwego/eino#994, QwenLM/qwen-code#7659), DeepSeek
    V4 400 "Thinking mode does not support this tool_choice" (deepseek-ai/DeepSeek-V3#1376;
    it thinks by default), Kimi "tool_choice 'required' is incompatible with thinking enabled"
    (AstrBotDevs/AstrBot#7805), and Anthropic, relayed by a gateway, "Thinking may not be
    enabled when tool_choice forces tool use" (usestrix/strix#505). Clients force a tool for
    structured output and side requests (Claude Code's, through the Messages front, with its
    thinking as `reasoning_effort`; LangChain's `with_structured_output`), so each such request
    fails whole.

    With the route's `forced_tool_choice` (learned from the refusal, proxy/learning/
    refusal_rules.py, or set): "unforced" sends `tool_choice: "auto"`, the tools as they are
    (the model is asked, not made, to call; these upstreams leave no other way while they
    think), counted `tool_choice_unforced`; "without_thinking" keeps the forced choice and
    leaves out the parameters that ask for thinking, counted
    `thinking_dropped_for_tool_choice`. A request that turns thinking off, or forces nothing,
    is left as it came."""

    async def apply(self, body: dict[str, Any], context: RequestContext) -> bool:
        how = context.rules.forced_tool_choice
        if how == "as_sent" or not forces_a_tool_thinking(body):
            return False
        if how == "unforced":
            body["tool_choice"] = "auto"
            context.tally.count(UNFORCED_KIND)
            return True
        asked = thinking_asked(body)
        if not asked:
            return False
        for name in asked:
            del body[name]
        context.tally.count(THINKING_LEFT_OUT_KIND)
        return True
