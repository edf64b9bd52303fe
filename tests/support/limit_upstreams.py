"""Checkers for RefusingUpstream (refusing_upstream.py) that refuse what real upstreams refuse
about a completion budget and a forced tool choice, with their real error bodies (each cited):

- the budget over the model's output limit: DeepSeek's, OpenAI's, Volcengine's, Ollama
  Cloud's words, each naming the limit;
- the budget over what the context leaves the prompt: vLLM's, counting the prompt with its own
  "tokenizer" (`prompt_tokens`: a word is a token, each message four more), which the proxy
  cannot know;
- a forced tool choice in thinking mode: DashScope's (Qwen), DeepSeek V4's, Kimi's, and
  Anthropic's as a LiteLLM gateway relays it.

Each checker is `(body, raw) -> Rejection | None`, None when the upstream takes the request.
"""

from __future__ import annotations

from typing import Any

import orjson

from tests.support.refusing_upstream import JSON, Checker, Rejection

BUDGETS = ("max_tokens", "max_completion_tokens")


def _asked(body: dict[str, Any]) -> dict[str, int]:
    return {name: body[name] for name in BUDGETS if isinstance(body.get(name), int)}


def _error(status: int, error: dict[str, Any], **top: Any) -> Rejection:
    return status, JSON, orjson.dumps({"error": error, **top})


def deepseek_budget_refusal(limit: int = 8192) -> bytes:
    """DeepSeek's body for `max_tokens` past its range (deepseek-ai/DeepSeek-V3#69), a 400."""
    message = f"Invalid max_tokens value, the valid range of max_tokens is [1, {limit}]"
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
    return orjson.dumps({"error": error})


def deepseek_budget(limit: int = 8192) -> Checker:
    """DeepSeek's 400 for `max_tokens` past its range."""

    def check(body: dict[str, Any], raw: bytes) -> Rejection | None:
        if not any(value > limit for value in _asked(body).values()):
            return None
        return 400, JSON, deepseek_budget_refusal(limit)

    return check


def openai_budget(limit: int = 16384) -> Checker:
    """OpenAI's 400 for `max_tokens` past the model's completion limit
    (ChatGPTNextWeb/NextChat#3195)."""

    def check(body: dict[str, Any], raw: bytes) -> Rejection | None:
        asked = body.get("max_tokens")
        if not isinstance(asked, int) or asked <= limit:
            return None
        message = (
            f"max_tokens is too large: {asked}. This model supports at most {limit} completion "
            f"tokens, whereas you provided {asked}."
        )
        error = {"message": message, "type": "invalid_request_error", "param": "max_tokens"}
        return _error(400, {**error, "code": None})

    return check


def volcengine_budget(limit: int = 12288) -> Checker:
    """Volcengine Ark's (Doubao's) 400 for `max_completion_tokens` past its maximum
    (Gitlawb/openclaude#331)."""

    def check(body: dict[str, Any], raw: bytes) -> Rejection | None:
        over = [(name, value) for name, value in _asked(body).items() if value > limit]
        if not over:
            return None
        name, asked = over[0]
        message = (
            f"The parameter `{name}` specified in the request are not valid: integer above "
            f"maximum value, expected a value <= {limit}, but got {asked} instead. Request id: "
            "0217752964393142fa50af54af66c5cfb922304bfd59ea286af93"
        )
        error = {"code": "InvalidParameter", "message": message, "param": name}
        return _error(400, {**error, "type": "BadRequest"})

    return check


def ollama_cloud_budget(limit: int = 65536) -> Checker:
    """Ollama Cloud's 400 on its OpenAI-compatible endpoint (DaviRain-Su/hyper-grok-build#44,
    anomalyco/models.dev#1707)."""

    def check(body: dict[str, Any], raw: bytes) -> Rejection | None:
        asked = body.get("max_tokens")
        if not isinstance(asked, int) or asked <= limit:
            return None
        message = (
            f"max_tokens ({asked}) exceeds model's maximum output tokens ({limit}) for model "
            f"{body.get('model')} (ref: dd793cb9-4998-49d4-994b-5a7e0d67e733)"
        )
        return _error(400, {"message": message, "type": "invalid_request_error", "param": None})

    return check


def prompt_tokens(body: dict[str, Any]) -> int:
    """The fake's own count of a prompt: a word of text a token, four per message (the chat
    template's), the tools' JSON a token per eight bytes."""
    count = 0
    for message in body.get("messages") or ():
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else None
            count += 4 + (len(text.split()) if isinstance(text, str) else 0)
    return count + len(orjson.dumps(body.get("tools") or [])) // 8


def vllm_context(context: int = 4096) -> Checker:
    """vLLM's 400 for a prompt and a budget past `--max-model-len` (serving_engine's
    _validate_input; the body as opsconductor-ng's TOKEN_LIMIT_FIX.md quotes it), and for a
    prompt that alone passes it."""

    def check(body: dict[str, Any], raw: bytes) -> Rejection | None:
        prompt = prompt_tokens(body)
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        if prompt >= context:
            message = (
                f"This model's maximum context length is {context} tokens. However, your "
                f"request has {prompt} input tokens. Please reduce the length of the input "
                "messages. None"
            )
        elif isinstance(asked, int) and prompt + asked > context:
            message = (
                f"'max_tokens' or 'max_completion_tokens' is too large: {asked}. This model's "
                f"maximum context length is {context} tokens and your request has {prompt} "
                f"input tokens ({asked} > {context} - {prompt}). None"
            )
        else:
            return None
        return _error(
            400, {"message": message, "type": "BadRequestError", "param": None, "code": 400}
        )

    return check


def openai_context(context: int = 8192) -> Checker:
    """OpenAI's (and DeepSeek's) 400 for messages and completion past the context
    (ChatGPTNextWeb/NextChat#3195, evalstate/fast-agent#621)."""

    def check(body: dict[str, Any], raw: bytes) -> Rejection | None:
        prompt = prompt_tokens(body)
        asked = body.get("max_tokens")
        if not isinstance(asked, int) or prompt + asked <= context:
            return None
        message = (
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{prompt + asked} tokens ({prompt} in the messages, {asked} in the completion). "
            "Please reduce the length of the messages or completion."
        )
        error = {"message": message, "type": "invalid_request_error", "param": "messages"}
        return _error(400, {**error, "code": "context_length_exceeded"})

    return check


def _forced(body: dict[str, Any]) -> bool:
    choice = body.get("tool_choice")
    return choice == "required" or isinstance(choice, dict)


def dashscope_forced_tool(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """DashScope's 400 for a forced tool choice while Qwen thinks (its default here, unless
    `enable_thinking` is false) (cloudwego/eino#994)."""
    if not _forced(body) or body.get("enable_thinking") is False:
        return None
    message = (
        "<400> InternalError.Algo.InvalidParameter: The tool_choice parameter does not "
        "support being set to required or object in thinking mode"
    )
    error = {"message": message, "type": "invalid_request_error", "param": None}
    request_id = "5bf78562-0341-9de2-8d10-5429ef761b7e"
    return _error(
        400,
        {**error, "code": "invalid_parameter_error"},
        id=f"chatcmpl-{request_id}",
        request_id=request_id,
    )


def deepseek_forced_tool(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """DeepSeek V4's 400 for "required" or a named function in thinking mode, which is on
    unless `thinking` says "disabled" (deepseek-ai/DeepSeek-V3#1376)."""
    thinking = body.get("thinking")
    off = isinstance(thinking, dict) and thinking.get("type") == "disabled"
    if not _forced(body) or off:
        return None
    error = {"message": "Thinking mode does not support this tool_choice"}
    return _error(400, {**error, "type": "invalid_request_error"})


def kimi_forced_tool(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """Kimi's 400 for a forced tool choice while it thinks (AstrBotDevs/AstrBot#7805,
    can1357/oh-my-pi#827)."""
    if not _forced(body):
        return None
    said = "required" if body["tool_choice"] == "required" else "specified"
    message = f"tool_choice '{said}' is incompatible with thinking enabled"
    return _error(400, {"message": message, "type": "invalid_request_error"})


def litellm_anthropic_forced_tool(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """A LiteLLM gateway in front of Anthropic, which turns `reasoning_effort` into thinking and
    relays Anthropic's refusal of it beside a forced tool choice (usestrix/strix#505)."""
    if not _forced(body) or "reasoning_effort" not in body:
        return None
    anthropic = orjson.dumps(
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "Thinking may not be enabled when tool_choice forces tool use.",
            },
        }
    ).decode()
    message = f"litellm.BadRequestError: AnthropicException - {anthropic}"
    return _error(400, {"message": message, "type": None, "param": None, "code": "400"})
