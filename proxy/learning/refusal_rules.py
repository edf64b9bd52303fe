"""The request rules learned from the refusal that calls for each (proxy/learning/refusals.py):
a route with a key left "auto" gets the rule the upstream's own 400/422 names, without a
profile, so a gateway, a tunnel or a self-hosted server behind a plain host name works from the
second send on.

Each rule is data (`REQUEST_RULES`): the route key it sets and to what, the statuses its
refusal comes with, the texts that say it (each quoting the public report it comes from, as
`error_messages` reads them out of any upstream's error shape), and what the request must carry
for the rule to be the answer (a refusal of developer messages says nothing to a request
without one). Doctor reads the same table (`rule_for`) to say which key a refusal called for.

The fix is never written here: a rule sets a key of `RouteRules`, and the request phase runs
its repair (proxy/repair/) again on the client's request, as it would with the key configured.
What a rule is and does is request_rule.py's; here are the rules themselves.

Beside them, the refusals of a completion budget (`TOKEN_LIMIT_RULES`, token_limit_rule.py):
each says a number, the model's output limit (remembered, `max_tokens_limit` then clamps up
front) or the room the context leaves this prompt (this request's resend only).
"""

from __future__ import annotations

import re
from typing import Any

from proxy.learning.error_messages import error_messages
from proxy.learning.request_rule import Request, RequestRule
from proxy.learning.token_limit_rule import TokenLimitRule
from proxy.repair.repairs.cache_control import has_marks, has_ttl_marks, marked_parts_at
from proxy.repair.repairs.forced_tool_choice import (
    forces_a_tool_asking_thinking,
    forces_a_tool_thinking,
)
from proxy.repair.repairs.response_format import asks_json_schema
from proxy.wire.json_shapes import objects_in

__all__ = [
    "BAD_REQUEST",
    "REQUEST_RULES",
    "TOKEN_LIMIT_RULES",
    "VALIDATION",
    "Request",
    "RequestRule",
    "TokenLimitRule",
    "rule_for",
]


def _messages(request: Request) -> list[dict[str, Any]]:
    return objects_in(request.get("messages"))


def _has_tools(request: Request) -> bool:
    return bool(request.get("tools"))


def _has_named_calls(request: Request) -> bool:
    return _has_tools(request) or any(m.get("tool_calls") for m in _messages(request))


def _has_developer(request: Request) -> bool:
    return any(m.get("role") == "developer" for m in _messages(request))


def _has_system_after_first(request: Request) -> bool:
    return any(m.get("role") == "system" for m in _messages(request)[1:])


def _has_call_ids(request: Request) -> bool:
    return any(m.get("tool_calls") or "tool_call_id" in m for m in _messages(request))


def _calls_beside_content(request: Request) -> bool:
    return any(
        m.get("role") == "assistant" and m.get("tool_calls") and m.get("content") is not None
        for m in _messages(request)
    )


def _calls_without_content(request: Request) -> bool:
    return any(
        m.get("role") == "assistant" and m.get("tool_calls") and m.get("content") is None
        for m in _messages(request)
    )


def _tool_parts(request: Request) -> bool:
    return any(
        m.get("role") == "tool" and isinstance(m.get("content"), list) for m in _messages(request)
    )


BAD_REQUEST = frozenset({400})
VALIDATION = frozenset({400, 422})
"""Validation errors, answered before generation (a 422 from axum and FastAPI servers). Never
429 or 5xx: those may have run."""

_DECLARATION = r"tools\[\d+\]\.function_declarations\[\d+\]\.parameters[^']*"

REQUEST_RULES: tuple[RequestRule, ...] = (
    RequestRule(
        "schema_dialect",
        "gemini",
        BAD_REQUEST,
        (
            # Gemini: 'Invalid JSON payload received. Unknown name "additionalProperties" at
            # 'tools[0].function_declarations[0].parameters': Cannot find field.'
            # (openswarm#24, CLIProxyAPI#97, zed#44875, zed#30188, litellm#6459).
            re.compile(r"Unknown name \"[^\"]+\" at '" + _DECLARATION + "': Cannot find field"),
            # A type array: 'Unknown name "type" at '…properties[0].value': Proto field is not
            # repeating, cannot start list.' (zed#44875, litellm#12031).
            re.compile(r"at '" + _DECLARATION + "': Proto field is not repeating"),
            # A number in an enum: "Invalid value at '…enum[0]' (TYPE_STRING), 1"
            # (CLIProxyAPI#129).
            re.compile(r"Invalid value at '" + _DECLARATION + r"\.enum\[\d+\]' \(TYPE_STRING\)"),
            # "…parameters.properties[url].format: only 'enum' and 'date-time' are supported
            # for STRING type" (langchain-mcp-tools-ts#36, litellm#6970).
            re.compile(r"function_declarations\[\d+\]\.parameters\S*\.format: only 'enum'"),
        ),
        _has_tools,
    ),
    RequestRule(
        "schema_dialect",
        "moonshot",
        BAD_REQUEST,
        (
            # Moonshot (Kimi): "tools.function.parameters is not a valid moonshot flavored json
            # schema, details: <At path 'properties.truncateMode': type is not defined>"
            # (kimi-cli#1595, #2531, opencode#37496).
            re.compile(r"tools\.function\.parameters is not a valid moonshot flavored json"),
            # 'tools.function.parameters.type is required and must be "object"'
            # (MiqroForge-Desktop#1165).
            re.compile(r"tools\.function\.parameters\.type is required and must be \"object\""),
        ),
        _has_tools,
    ),
    RequestRule(
        "tool_names",
        "gemini",
        BAD_REQUEST,
        (
            # Gemini: "* GenerateContentRequest.tools[0].function_declarations[0].name: Invalid
            # function name. Must start with a letter or an underscore. Must be alphameric
            # (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or dashes (-), with a
            # maximum length of 64." (cline/cline#7339, kaitranntt/ccs#25,
            # google-gemini/gemini-cli#2966).
            re.compile(r"Invalid function name\. Must start with a letter or an underscore"),
        ),
        _has_named_calls,
    ),
    RequestRule(
        "tool_names",
        "openai",
        BAD_REQUEST,
        (
            # OpenAI (and DeepSeek, nikkigallery/Whimbox#61): "Invalid 'tools[0].function.name':
            # string does not match pattern. Expected a string that matches the pattern
            # '^[a-zA-Z0-9_-]+$'." (brekkylab/ailoy#109), "… string too long. Expected a string
            # with maximum length 64" (openai/codex#1289), and the same for the history's
            # `messages[1].tool_calls[0].function.name` (mcp-use/mcp-use#90).
            re.compile(
                r"Invalid '(?:tools\[\d+\]|messages\[\d+\]\.tool_calls\[\d+\])\.function\.name':"
                r" string (?:does not match pattern|too long)"
            ),
        ),
        _has_named_calls,
    ),
    RequestRule(
        "developer_role",
        "system",
        VALIDATION,
        (
            # DeepSeek (serde, 422, plain text): "Failed to deserialize the JSON body into the
            # target type: messages[0].role: unknown variant `developer`, expected one of
            # `system`, `user`, `assistant`, `tool`", and "messages[0]: unknown role:
            # developer" (pi#7603).
            re.compile(r"messages\[\d+\](?:\.role)?: unknown (?:variant|role):? `?developer\b"),
            # Mistral (FastAPI's 422, its roles system, user, assistant and tool): no report
            # quotes one for `developer`; pydantic's literal_error at the message's role.
            re.compile(r"messages\[\d+\]\.role: Input should be 'system', 'user', 'assistant'"),
        ),
        _has_developer,
    ),
    RequestRule(
        "system_messages",
        "merged",
        BAD_REQUEST,
        (
            # vLLM with Qwen 3.5+'s chat template: "System message must be at the beginning."
            # (vllm#41114; llama.cpp, Ollama and LM Studio raise it from the same template).
            re.compile(r"System message must be at the beginning"),
        ),
        _has_system_after_first,
    ),
    RequestRule(
        "tool_call_ids",
        "nine_alnum",
        VALIDATION,
        (
            # Mistral: "Tool call id was call_abc123 but must be a-z, A-Z, 0-9, with a length
            # of 9." (ironclaw#1241, eca#233).
            re.compile(r"Tool call id was \S* but must be a-z, A-Z, 0-9, with a length of 9"),
        ),
        _has_call_ids,
    ),
    RequestRule(
        "assistant_tool_content",
        "null",
        BAD_REQUEST,
        (
            # Mistral: "Assistant message must have either content or tool_calls, but not
            # both." (langchain#21196).
            re.compile(r"Assistant message must have either content or tool_calls, but not"),
        ),
        _calls_beside_content,
    ),
    RequestRule(
        "assistant_tool_content",
        "empty",
        BAD_REQUEST,
        (
            # LM Studio: "Invalid 'content': 'content' field must be a string or an array of
            # objects." (lmstudio#261; mistral-common's endpoint, mistral-common#324).
            re.compile(r"'content' field must be a string or an array of objects"),
        ),
        _calls_without_content,
    ),
    RequestRule(
        "cache_control",
        "without_ttl",
        VALIDATION,
        (
            # Anthropic on Vertex and Bedrock's older Claude models refuse the `ttl` of a mark
            # (pi#1570, tghamm/Anthropic.SDK#165), in its loc form "system.0.cache_control.ttl:
            # Extra inputs are not permitted", as a gateway in front of them relays it; pydantic
            # servers say the same of the `ttl` in their `detail` list.
            re.compile(r"cache_control\W{1,6}ttl\W{0,24}(?:msg\W{0,6})?Extra inputs are not perm"),
            # Bedrock, for a model that is not Anthropic's: "Extended TTL prompt caching is only
            # supported for Anthropic models" (pi#1570).
            re.compile(r"Extended TTL prompt caching is only supported for"),
        ),
        has_ttl_marks,
    ),
    RequestRule(
        "cache_control",
        "dropped",
        VALIDATION,
        (
            # Groq and Cerebras: "'messages.0' : for 'role:system' the following must be
            # satisfied[('messages.0' : property 'cache_control' is unsupported)]"
            # (alma-releases#59).
            re.compile(r"property 'cache_control' is unsupported"),
            # pydantic with extra fields forbidden (a FastAPI gateway, mistral-common behind
            # vLLM, Anthropic's own validator relayed): "messages.0.content.0.text.
            # cache_control: Extra inputs are not permitted" (Mirascope#618, new-api#5982).
            re.compile(r"cache_control\W{0,24}(?:msg\W{0,6})?Extra inputs are not permitted"),
            # DeepSeek, for the system message as parts that a mark needs: "Failed to
            # deserialize the JSON body into the target type: messages[0]: invalid type:
            # sequence, expected a string" (litellm#6642); Groq: "'messages.0' : for
            # 'role:system' the following must be satisfied[('messages.0.content' : value must
            # be a string)]" (OpenHands#4643). Only when the message it names is marked parts.
            re.compile(
                r"messages\[(?P<at>\d+)\](?:\.content)?: invalid type: sequence, expected a str"
            ),
            re.compile(r"'messages\.(?P<at>\d+)\.content' : value must be a string"),
        ),
        has_marks,
        named=marked_parts_at,
    ),
    RequestRule(
        "tool_content",
        "string",
        BAD_REQUEST,
        (
            # Kimi: "Failed to deserialize the JSON body into the target type: messages[3]:
            # invalid type: sequence, expected a string" (kimi-cli#1762); llama-style servers:
            # "tool messages must contain string content" (ninfer#56).
            re.compile(r"messages\[\d+\](?:\.content)?: invalid type: sequence, expected a str"),
            re.compile(r"tool messages must contain string content"),
        ),
        _tool_parts,
    ),
    RequestRule(
        "response_format_schema",
        "json_object",
        VALIDATION,
        (
            # DeepSeek: {"error":{"message":"This response_format type is unavailable now",
            # "type":"invalid_request_error","param":null,"code":"invalid_request_error"}}, 400
            # (llm-exe#662, inspect_ai#4916, Vane#969); before, serde's "Failed to deserialize
            # the JSON body into the target type: response_format: response_format.type
            # `json_schema` is unavailable now at line 1 column 1193" (litellm#7580,
            # browser-use#215; a 422 in deep-research#22).
            re.compile(r"This response_format type is unavailable now"),
            re.compile(r"response_format\.type `json_schema` is unavailable now"),
            # Groq, for a model without structured outputs: "This model does not support
            # response format `json_schema`. See supported models at https://console.groq.com/
            # docs/structured-outputs#supported-models" (param "response_format", 400).
            re.compile(r"does not support response format `json_schema`"),
            # vLLM before it took schemas (vllm#7654): pydantic's literal_error at
            # response_format.type, "Input should be 'text' or 'json_object'".
            re.compile(r"Input should be 'text' or 'json_object'"),
        ),
        asks_json_schema,
    ),
    RequestRule(
        "forced_tool_choice",
        "unforced",
        BAD_REQUEST,
        (
            # DashScope (Qwen 3.5+ thinking): {"error":{"message":"<400>
            # InternalError.Algo.InvalidParameter: The tool_choice parameter does not support
            # being set to required or object in thinking mode","type":"invalid_request_error",
            # "param":null,"code":"invalid_parameter_error"},…} (cloudwego/eino#994,
            # QwenLM/qwen-code#7659, can1357/oh-my-pi#886). It names the tool choice.
            re.compile(r"tool_choice parameter does not support being set to required or object"),
            # DeepSeek V4, thinking by default: {"error":{"message":"Thinking mode does not
            # support this tool_choice","type":"invalid_request_error"}} for "required" or a
            # named function (deepseek-ai/DeepSeek-V3#1376, osaurus-ai/osaurus#1940).
            re.compile(r"Thinking mode does not support this tool_choice"),
            # Kimi: "tool_choice 'required' is incompatible with thinking enabled" and
            # "tool_choice 'specified' …" for a named one (AstrBotDevs/AstrBot#7805,
            # can1357/oh-my-pi#827); its thinking models cannot turn thinking off
            # (theopenco/llmgateway#2090), so the choice gives way.
            re.compile(r"tool_choice '(?:required|specified)' is incompatible with thinking"),
        ),
        forces_a_tool_thinking,
    ),
    RequestRule(
        "forced_tool_choice",
        "without_thinking",
        BAD_REQUEST,
        (
            # Anthropic's, relayed by a chat-completions gateway (LiteLLM: "litellm.
            # BadRequestError: AnthropicException - {"type":"error","error":{"type":
            # "invalid_request_error","message":"Thinking may not be enabled when tool_choice
            # forces tool use."}}", usestrix/strix#505; Bedrock's "The model returned the
            # following errors: …", can1357/oh-my-pi#341). It names the thinking: the forced
            # choice stays, the thinking parameters go.
            re.compile(r"Thinking may not be enabled when tool_choice forces tool use"),
        ),
        forces_a_tool_asking_thinking,
    ),
)
"""Every request rule a refusal can call for, in the order they are tried."""

LIMIT_LEARNED_KIND = "max_tokens_limit_learned"
FITTED_KIND = "max_tokens_fitted"

_BUDGET = r"`?max_(?:completion_)?tokens`?"

TOKEN_LIMIT_RULES: tuple[TokenLimitRule, ...] = (
    TokenLimitRule(
        LIMIT_LEARNED_KIND,
        "max_tokens_limit",
        BAD_REQUEST,
        (
            # DeepSeek: {"error":{"message":"Invalid max_tokens value, the valid range of
            # max_tokens is [1, 8192]","type":"invalid_request_error","param":null,"code":
            # "invalid_request_error"}} (deepseek-ai/DeepSeek-V3#69, HKUDS/nanobot#651).
            re.compile(
                r"Invalid max_tokens value, the valid range of max_tokens is \[1, (?P<limit>\d+)"
            ),
            # DashScope (Qwen): "<400> InternalError.Algo.InvalidParameter: Range of max_tokens
            # should be [1, 8192]" (open-webui/open-webui#10507).
            re.compile(r"Range of max_tokens should be \[1, (?P<limit>\d+)\]"),
            # OpenAI: "max_tokens is too large: 32000. This model supports at most 16384
            # completion tokens, whereas you provided 32000." (param "max_tokens";
            # ChatGPTNextWeb/NextChat#3195, enoch3712/ExtractThinker#346).
            re.compile(
                _BUDGET + r" is too large: (?P<asked>\d+)\. This model supports at most "
                r"(?P<limit>\d+) completion tokens"
            ),
            # Groq: "max_tokens for `llama-3.1-8b-instant` must be less than or equal to 8000"
            # (skapadia3214/groq-moa#8), "`max_tokens` must be less than or equal to `40960`,
            # the maximum value for `max_tokens` is less than the `context_window` for this
            # model" (RooCodeInc/Roo-Code#5136).
            re.compile(
                _BUDGET + r"(?: for `[^`]+`)? must be less than or equal to `?(?P<limit>\d+)"
            ),
            # Volcengine Ark (Doubao): "The parameter `max_completion_tokens` specified in the
            # request are not valid: integer above maximum value, expected a value <= 12288,
            # but got 32000 instead." (Gitlawb/openclaude#331).
            re.compile(
                r"The parameter " + _BUDGET + r" specified in the request are not valid: "
                r"integer above maximum value, expected a value <= (?P<limit>\d+), "
                r"but got (?P<asked>\d+) instead"
            ),
            # Ollama Cloud: "max_tokens (202752) exceeds model's maximum output tokens (131072)
            # for model glm-5.1" (anomalyco/models.dev#1707, DaviRain-Su/hyper-grok-build#44).
            re.compile(
                r"max_tokens \((?P<asked>\d+)\) exceeds model's maximum output tokens "
                r"\((?P<limit>\d+)\)"
            ),
        ),
        remembers=True,
        done=(
            "naming the most completion tokens the model takes (%s); sent once more with the "
            "budget lowered to it, and lowered up front for this upstream and model"
        ),
    ),
    TokenLimitRule(
        FITTED_KIND,
        "max_tokens_fit",
        BAD_REQUEST,
        (
            # vLLM (and NVIDIA NIM on it): "'max_tokens' or 'max_completion_tokens' is too
            # large: 64000. This model's maximum context length is 65536 tokens and your
            # request has 24235 input tokens (64000 > 65536 - 24235)." (serving_engine's
            # _validate_input; claude-code-best/claude-code#272).
            re.compile(
                r"'max_tokens' or 'max_completion_tokens' is too large: (?P<asked>\d+)\. "
                r"This model's maximum context length is (?P<context>\d+) tokens and your "
                r"request has (?P<prompt>\d+) input tokens"
            ),
            # OpenAI, DeepSeek and vLLM before: "This model's maximum context length is 131072
            # tokens. However, you requested 131134 tokens (122942 in the messages, 8192 in the
            # completion). Please reduce the length of the messages or completion."
            # (evalstate/fast-agent#621, vllm-project/vllm#20409).
            re.compile(
                r"maximum context length is (?P<context>\d+) tokens\. However, you requested "
                r"\d+ tokens \((?P<prompt>\d+) in the messages, (?P<asked>\d+) in the "
                r"completion\)"
            ),
        ),
        remembers=False,
        done=(
            "saying the prompt leaves room for %s; sent once more with the budget lowered to "
            "fit, for this request only (the room depends on the prompt)"
        ),
    ),
)
"""The refusals of a completion budget, tried before every other rule (their texts name
`max_tokens`, which no parameter refusal must take for a parameter to drop). The first holds
for the model: its limit is remembered. The second is the context's: what is left for the
completion is the context less this prompt, which the upstream counted with its own tokenizer
and the proxy cannot count the same way for the next request (a guess too low refuses again, one
too high cuts an answer that would have fitted), so each such refusal is answered by one resend
that fits, and nothing is remembered."""


def rule_for(status: int, error: str, request: Request) -> RequestRule | None:
    """The rule a refusal of `request` calls for, if any (doctor asks this too)."""
    messages = error_messages(error)
    for rule in REQUEST_RULES:
        if status in rule.statuses and rule.carries(request) and rule.says(messages, request):
            return rule
    return None
