"""The rules of one route, declared once: the keys its table sets (`RouteRuleKeys`, which the
settings embed, so a key has the same name in the config file and in the code) and what they
come to against the route's profile (`RouteRules`, the one value the repairs read).

"auto" is resolved here and nowhere else (`resolve`), once per route and profile: a key set to
"auto" takes the profile's value, "none" sends what the client sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from proxy.repair.calls.tool_names import TOOL_NAME_RULES
from proxy.repair.dialects.schemas import DIALECTS
from proxy.repair.markup.rules import REASONING_FIELDS, MarkupRules
from proxy.repair.profiles import (
    ASSISTANT_TOOL_CONTENTS,
    CACHE_CONTROLS,
    DEVELOPER_ROLES,
    PROFILES,
    SYSTEM_MESSAGES,
    TOOL_CALL_IDS,
    TOOL_CONTENTS,
    MessageRules,
    ProviderProfile,
)
from proxy.wire.config_values import ConfigError, one_of

SCHEMA_DIALECT_NAMES = ("auto", "none", *DIALECTS)
TOOL_NAME_RULE_NAMES = ("auto", "none", *TOOL_NAME_RULES)
RESPONSE_FORMAT_SCHEMAS = ("as_sent", "json_object")
"""How a `json_schema` response format goes up: as the client sent it, or as `json_object`
with the schema in the prompt (proxy/repair/repairs/response_format.py)."""
FORCED_TOOL_CHOICES = ("as_sent", "unforced", "without_thinking")
"""How a forced `tool_choice` goes up (proxy/repair/repairs/forced_tool_choice.py): as the
client sent it, as "auto", or as sent with the request's thinking parameters left out."""
LEARNABLE_KEYS = (
    "schema_dialect",
    "tool_names",
    *(rule.name for rule in fields(MessageRules)),
    "response_format_schema",
    "cache_control",
    "think_opened_by_template",
    "max_tokens_limit",
    "forced_tool_choice",
)
"""The keys the upstream may teach a route while they are "auto": by its refusal
(proxy/learning/refusal_rules.py), or by its answers (`think_opened_by_template`,
proxy/learning/answer_rules.py). A key set explicitly, to any value, is never learned."""


@dataclass(frozen=True, slots=True)
class RouteRuleKeys:
    """The keys of an `[upstream]` or `[[routes]]` table that decide what the repairs do for
    that route, as the config file spells them (the settings inherit them: the table stays
    flat). Each key that can be "auto" defaults to it: the profile decides, and the upstream's
    own refusal may teach it (`LEARNABLE_KEYS`); any other value is the route's, never learned
    over."""

    text_tool_calls: bool = True
    """Turn tool-call markup the upstream wrote as content into real tool calls (only for
    declared tools, with arguments that validate; proxy/repair/markup/)."""
    text_reasoning: bool = True
    """Move `<think>…</think>` at the start of content, and harmony's analysis channel written
    as text, into the reasoning field."""
    reasoning_field: str = "reasoning_content"
    """Where that reasoning goes: "reasoning_content", "reasoning" or "both"."""
    think_opened_by_template: bool | str = "auto"
    """The chat template opens `<think>` itself: content starts as reasoning until `</think>`.
    "auto" (false until learned): once an upstream and model answer with a `</think>` nothing
    opened, it is true for them for `[parameters] ttl_seconds`."""
    schema_dialect: str = "auto"
    """The JSON Schema dialect tool parameters are rewritten into: "auto" (the profile's:
    gemini and vertex "gemini", kimi "moonshot", others none), "none", "gemini", "moonshot".
    Left "auto", also learned from the upstream's own refusal."""
    # The message rules (proxy/repair/messages/); "auto" is the profile's `MessageRules`.
    developer_role: str = "auto"
    """"keep", or "system": `developer` messages go up as `system` (auto: deepseek, mistral).
    Left "auto", also learned from the upstream's own refusal."""
    system_messages: str = "auto"
    """"as_sent", or "merged": all system messages go up as one leading message, for chat
    templates that want it (Qwen 3.5+ on vLLM: "System message must be at the beginning").
    Left "auto", also learned from the upstream's own refusal."""
    assistant_tool_content: str = "auto"
    """Content beside an assistant's `tool_calls`: "as_sent", "null" ("" becomes null; auto:
    mistral) or "empty" (null or missing becomes "", for LM Studio). Left "auto", also learned
    from the upstream's own refusal."""
    tool_content: str = "auto"
    """"as_sent", or "string": tool results given as text parts go up as a string (auto: kimi).
    Left "auto", also learned from the upstream's own refusal."""
    tool_call_ids: str = "auto"
    """"as_sent", or "nine_alnum": call ids that are not nine alphanumerics are mapped to ones
    that are, the same way on every turn (auto: mistral). Left "auto", also learned from the
    upstream's own refusal."""
    tool_names: str = "auto"
    """The rule tool names must follow upstream; names it rejects (`files.read`, `mcp/x/read`,
    a leading digit, over 64 characters) are renamed, and renamed back in the answer: "auto"
    (the profile's: gemini and vertex "gemini", openai and deepseek "openai", others none),
    "none", "openai" (`[a-zA-Z0-9_-]{1,64}`), "gemini" (`[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}`).
    Left "auto", also learned from the upstream's own refusal."""
    response_format_schema: str = "auto"
    """A `response_format` of type `json_schema` (structured output: the AI SDK's
    generateObject, Claude Code's session title): "as_sent", or "json_object": it goes up as
    `{"type": "json_object"}`, and the schema goes into the leading system message as "Answer
    with one JSON object, and nothing else, that validates against this JSON schema: …", for
    upstreams that take JSON mode but not a schema (DeepSeek: "This response_format type is
    unavailable now"). "auto" (as sent until learned): learned from the upstream's own refusal,
    never from its name."""
    max_tokens_limit: int | str = "auto"
    """The most `max_tokens` / `max_completion_tokens` (the Responses front's
    `max_output_tokens`, the Messages front's `max_tokens`) an upstream takes: a larger value
    goes up as this one, never a smaller one raised. "auto" (as sent until learned): learned
    from the upstream's own refusal that names its limit (DeepSeek's "the valid range of
    max_tokens is [1, 8192]", OpenAI's "supports at most 16384 completion tokens"); a refusal
    that the prompt and the completion together pass the context (vLLM's) is answered by one
    resend that fits this prompt, and not remembered. "none": sent as the client sent it, never
    learned; a number: clamped to it, never learned."""
    forced_tool_choice: str = "auto"
    """A forced `tool_choice` ("required", or a named function: Claude Code's structured
    output and side requests force one) to an upstream that refuses it in thinking mode:
    "as_sent"; "unforced": it goes up as "auto" (DashScope's "The tool_choice parameter does
    not support being set to required or object in thinking mode", DeepSeek's "Thinking mode
    does not support this tool_choice", Kimi's); "without_thinking": it goes up as sent, and
    the request's thinking parameters (`reasoning_effort`, `reasoning`, `thinking`,
    `enable_thinking`) do not (Anthropic's "Thinking may not be enabled when tool_choice forces
    tool use", through a gateway). "auto" (as sent until learned): learned from the refusal,
    whichever its words call for; a request that turns thinking off is sent as it came."""
    cache_control: str = "auto"
    """Anthropic's prompt-cache marks (`cache_control`, with or without a `ttl`) on content
    parts, messages and tools, which OpenRouter and other gateways honour for Anthropic and
    Gemini models: "as_sent"; "without_ttl" (each mark loses its `ttl`); "dropped" (every mark
    goes, and a system message or a lone user text made parts only to carry one goes up as a
    string again). "auto" (the profile's: deepseek, groq and cerebras "dropped", others as
    sent): also learned from the upstream's own refusal."""
    learn_rejected_parameters: bool = True
    """When the upstream answers 400/422 naming a top-level parameter the request sent (not
    model, messages, tools, tool_choice or stream), send the request once more without it, and
    drop it up front for this upstream and model for `[parameters] ttl_seconds`."""

    def __post_init__(self) -> None:
        opened = _flag_or_auto("think_opened_by_template", self.think_opened_by_template)
        object.__setattr__(self, "think_opened_by_template", opened)  # "true" from the env
        object.__setattr__(self, "max_tokens_limit", _limit_or_word(self.max_tokens_limit))
        one_of("forced_tool_choice", self.forced_tool_choice, ("auto", *FORCED_TOOL_CHOICES))
        one_of("reasoning_field", self.reasoning_field, REASONING_FIELDS)
        one_of("schema_dialect", self.schema_dialect, SCHEMA_DIALECT_NAMES)
        one_of("developer_role", self.developer_role, ("auto", *DEVELOPER_ROLES))
        one_of("system_messages", self.system_messages, ("auto", *SYSTEM_MESSAGES))
        one_of(
            "assistant_tool_content",
            self.assistant_tool_content,
            ("auto", *ASSISTANT_TOOL_CONTENTS),
        )
        one_of("tool_content", self.tool_content, ("auto", *TOOL_CONTENTS))
        one_of("tool_call_ids", self.tool_call_ids, ("auto", *TOOL_CALL_IDS))
        one_of("tool_names", self.tool_names, TOOL_NAME_RULE_NAMES)
        one_of(
            "response_format_schema",
            self.response_format_schema,
            ("auto", *RESPONSE_FORMAT_SCHEMAS),
        )
        one_of("cache_control", self.cache_control, ("auto", *CACHE_CONTROLS))


@dataclass(frozen=True, slots=True)
class RouteRules:
    """What the repairs do for one route and profile: its keys with "auto" resolved. The
    defaults are what a route with default keys gets on the evidence profile (`generic`)."""

    profile: ProviderProfile = PROFILES["generic"]
    """What the upstream needs (receipts, foreign fields, parameters), decided per request
    from the route's `profile`, its base URL and the model (`profile_for`)."""
    schema_dialect: str = ""
    """The JSON Schema dialect tool parameters go up in (a key of `DIALECTS`; "": as sent)."""
    tool_names: str = ""
    """The rule tool names must follow upstream (a key of `TOOL_NAME_RULES`; "": as sent)."""
    messages: MessageRules = field(default_factory=MessageRules)
    """The message shapes the upstream takes."""
    markup: MarkupRules = field(default_factory=MarkupRules)
    """What the markup repairs may do with text that is really calls or reasoning."""
    response_format_schema: str = "as_sent"
    """How a `json_schema` response format goes up (one of `RESPONSE_FORMAT_SCHEMAS`)."""
    max_tokens_limit: int = 0
    """The most `max_tokens` / `max_completion_tokens` goes up as (0: as sent)."""
    forced_tool_choice: str = "as_sent"
    """How a forced `tool_choice` goes up (one of `FORCED_TOOL_CHOICES`)."""
    cache_control: str = "as_sent"
    """How the `cache_control` marks go up (one of `CACHE_CONTROLS`)."""
    learn_rejected_parameters: bool = True
    """A 400/422 naming a parameter gets one more send without it, and is remembered."""
    learnable: frozenset[str] = field(default=frozenset(LEARNABLE_KEYS), compare=False)
    """The keys of `LEARNABLE_KEYS` the route left "auto": the ones a refusal may set. Not
    compared: two routes whose repairs do the same have the same rules (doctor asks whether a
    key changes anything)."""


def resolve(keys: RouteRuleKeys, profile: ProviderProfile) -> RouteRules:
    """The route's rules on `profile`: each "auto" is the profile's value, "none" is ""."""
    return RouteRules(
        profile=profile,
        schema_dialect=_resolved(keys.schema_dialect, profile.schema_dialect),
        tool_names=_resolved(keys.tool_names, profile.tool_names),
        messages=MessageRules(
            **{
                rule.name: _resolved(getattr(keys, rule.name), getattr(profile.messages, rule.name))
                for rule in fields(MessageRules)
            }
        ),
        markup=MarkupRules(
            text_tool_calls=keys.text_tool_calls,
            text_reasoning=keys.text_reasoning,
            reasoning_field=keys.reasoning_field,
            think_opened_by_template=keys.think_opened_by_template is True,  # "auto": not yet
        ),
        # No profile says "json_object": the refusal does, whatever the host (auto: as sent).
        response_format_schema=_resolved(keys.response_format_schema, "as_sent"),
        # Neither is a host's: the upstream's refusal says them (auto: as sent).
        max_tokens_limit=keys.max_tokens_limit if isinstance(keys.max_tokens_limit, int) else 0,
        forced_tool_choice=_resolved(keys.forced_tool_choice, "as_sent"),
        cache_control=_resolved(keys.cache_control, profile.cache_control),
        learn_rejected_parameters=keys.learn_rejected_parameters,
        learnable=frozenset(key for key in LEARNABLE_KEYS if getattr(keys, key) == "auto"),
    )


def _flag_or_auto(key: str, value: bool | str) -> bool | str:
    """A bool key that may also be "auto" (its type is not the settings' plain bool, so a
    string from the environment or a flag is read here)."""
    if isinstance(value, bool) or value == "auto":
        return value
    said = str(value).strip().lower()
    if said in ("true", "false"):
        return said == "true"
    raise ConfigError(f'{key}: must be true, false or "auto", got {value!r}')


def _limit_or_word(value: int | str) -> int | str:
    """`max_tokens_limit`: "auto", "none" or a positive integer (a string of digits from the
    environment or a flag is read here, the key's type not being the settings' plain int)."""
    if isinstance(value, bool):
        raise ConfigError(f'max_tokens_limit: must be "auto", "none" or a number, got {value!r}')
    if isinstance(value, int):
        number = value
    else:
        said = str(value).strip().lower()
        if said in ("auto", "none"):
            return said
        if not said.isdigit():
            raise ConfigError(
                f'max_tokens_limit: must be "auto", "none" or a number, got {value!r}'
            )
        number = int(said)
    if number < 1:
        raise ConfigError(f"max_tokens_limit: must be at least 1, got {number}")
    return number


def _resolved(configured: str, profiles: str) -> str:
    if configured == "auto":
        return profiles
    return "" if configured == "none" else configured
