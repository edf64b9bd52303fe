"""Provider profiles: what an upstream needs, decided once per request, never in the stream loop.

A profile comes from configuration (`upstream.profile`), else from the base URL's host. Any
other upstream (a local server, a tunnel, a gateway) gets the evidence profile, `generic`: every
receipt kind any provider issues is captured when it appears on the wire and returned to the same
upstream and tenant only, with no guess from the model name. What the wire cannot tell (Google's
placeholder for a signature nobody has) stays with the profiles of known hosts.

A provider's receipts (data it attaches to an assistant turn and needs back unchanged) are data
here: adding a provider means adding rules, not code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict
from urllib.parse import urlsplit

Path = tuple[str, ...]

SIGNATURE: Path = ("extra_content", "google", "thought_signature")
# Reported for Vertex's OpenAI endpoint; captured and returned the same way when it appears.
VERTEX_SIGNATURE: Path = ("extra_content", "vertex", "thought_signature")

# Google documents this value for history it cannot validate (another model's trace, a lost
# signature): the request is accepted without the signature check.
SKIP_SIGNATURE_VALIDATOR = "skip_thought_signature_validator"


@dataclass(frozen=True, slots=True)
class ReceiptRule:
    """One field an upstream hands out with an assistant turn and needs back unchanged."""

    kind: str
    """Names it in counters and logs: "signatures", "reasoning_content", "reasoning_details"."""
    path: Path
    """Where it sits, relative to a tool call (`on="call"`) or to the message / stream delta."""
    on: Literal["call", "tool_turn", "text_turn"]
    """A tool call (keyed by its id); an assistant message with tool calls (keyed by their
    ids); a text-only assistant message (keyed by its text and the question it answered)."""
    merge: Literal["last", "concat", "by_index"] = "last"
    """How stream deltas build it: the last value, concatenated strings, or pieces merged
    by their `index` and `type` (text fields concatenated, other fields as received)."""
    required: bool = False
    """A tool turn without it is rejected upstream: count the miss (nothing is invented)."""


@dataclass(frozen=True, slots=True)
class ReceiptPlaceholder:
    """A value an upstream documents for a receipt nobody has, and where it goes on a call."""

    kind: str
    """The receipt it stands in for: counted as `<kind>_placeholders`."""
    path: Path
    value: str


DEVELOPER_ROLES = ("keep", "system")
SYSTEM_MESSAGES = ("as_sent", "merged")
ASSISTANT_TOOL_CONTENTS = ("as_sent", "null", "empty")
TOOL_CONTENTS = ("as_sent", "string")
TOOL_CALL_IDS = ("as_sent", "nine_alnum")
CACHE_CONTROLS = ("as_sent", "without_ttl", "dropped")
"""How the `cache_control` marks on content parts, messages and tools go up: as sent, without
their `ttl`, or not at all (proxy/repair/repairs/cache_control.py)."""


@dataclass(frozen=True, slots=True)
class MessageRules:
    """The shapes of `messages` an upstream accepts, where it accepts less than OpenAI does.
    Each field is one rule of proxy/repair/messages/ (which names the upstreams and sources);
    the first value of each is "send what the client sent"."""

    developer_role: str = "keep"
    """"system": a `developer` message goes up as `system` (the upstream knows no developer)."""
    system_messages: str = "as_sent"
    """"merged": every system message goes up as one, first (the chat template wants that)."""
    assistant_tool_content: str = "as_sent"
    """Beside `tool_calls`: "null" (an empty content becomes null) or "empty" (a null or
    missing content becomes "")."""
    tool_content: str = "as_sent"
    """"string": a tool result given as text parts goes up as one string."""
    tool_call_ids: str = "as_sent"
    """"nine_alnum": call ids that are not nine alphanumerics are mapped to ones that are."""


@dataclass(frozen=True, slots=True)
class ParameterRule:
    """A top-level request parameter an upstream rejects (400/422) or knows by another name."""

    name: str
    rename_to: str = ""
    """Send the value under this name instead; "" drops the parameter."""
    only_values: tuple[object, ...] = ()
    """Applies only when the value is one of these (Cerebras takes `parallel_tool_calls`
    true, not false); empty: whatever the value."""

    def applies(self, value: object) -> bool:
        # `type(v) is type(value)`: False must not match 0, nor True 1.
        return not self.only_values or any(
            type(v) is type(value) and v == value for v in self.only_values
        )


@dataclass(frozen=True, slots=True)
class ProviderProfile:
    name: str
    receipts: tuple[ReceiptRule, ...] = ()
    first_call_placeholder: ReceiptPlaceholder | None = None
    """Where and what to put for a current-turn step whose first call has no receipt."""
    foreign_metadata: tuple[Path, ...] = ()
    """Fields another provider issued that this upstream must never receive."""
    foreign_kept_where_issued: bool = False
    """Keep a foreign field on a call or turn for which this very upstream issued it (the store
    holds it from its answer): evidence outranks the profile, so a gateway relaying Google keeps
    Google's signatures. False: foreign fields are always removed."""
    schema_dialect: str = ""
    """The JSON Schema dialect its tool schemas are rewritten into (a key of
    `proxy.repair.dialects.schemas.DIALECTS`); "" sends them as the client wrote them."""
    messages: MessageRules = MessageRules()
    """The message shapes it accepts (roles, contents, call ids); by default all of OpenAI's."""
    tool_names: str = ""
    """The rule its tool names must follow (a key of `proxy.repair.calls.tool_names.
    TOOL_NAME_RULES`); names it rejects are renamed, and renamed back in the answer. "" sends
    them as the client wrote them."""
    parameters: tuple[ParameterRule, ...] = ()
    """Request parameters this upstream rejects or renames (ParameterRepair applies them)."""
    cache_control: str = "as_sent"
    """What it takes of the `cache_control` marks (one of `CACHE_CONTROLS`): OpenRouter and
    the gateways in front of Anthropic and Gemini honour them, so they go as sent unless the
    upstream is known to refuse them, or refuses them on the wire."""

    _by_place: dict[str, tuple[ReceiptRule, ...]] = field(
        init=False, repr=False, compare=False, hash=False
    )
    """`rules(on)` for each place, computed once: every exchange asks."""

    def __post_init__(self) -> None:
        by_place = {
            on: tuple(rule for rule in self.receipts if rule.on == on)
            for on in ("call", "tool_turn", "text_turn")
        }
        by_place["message"] = by_place["tool_turn"] + by_place["text_turn"]
        object.__setattr__(self, "_by_place", by_place)

    def rules(self, on: str) -> tuple[ReceiptRule, ...]:
        """The receipts on a call, a `tool_turn` or a `text_turn` message, or any `message`."""
        return self._by_place.get(on, ())

    @property
    def keeps_receipts(self) -> bool:
        return bool(self.receipts)

    @property
    def requires_receipts(self) -> bool:
        """A tool turn without one of its receipts is refused upstream (DeepSeek's)."""
        return any(rule.required for rule in self._by_place["tool_turn"])


class _ReceiptFields(TypedDict, total=False):
    """ProviderProfile's receipt fields, shared by several profiles as `**` keywords."""

    receipts: tuple[ReceiptRule, ...]
    first_call_placeholder: ReceiptPlaceholder | None
    foreign_metadata: tuple[Path, ...]
    foreign_kept_where_issued: bool


_GOOGLE: _ReceiptFields = {
    "receipts": (
        ReceiptRule("signatures", SIGNATURE, "call"),
        ReceiptRule("signatures", VERTEX_SIGNATURE, "call"),
        ReceiptRule("signatures", SIGNATURE, "text_turn"),
        ReceiptRule("signatures", VERTEX_SIGNATURE, "text_turn"),
        ReceiptRule("signatures", SIGNATURE, "tool_turn"),
        ReceiptRule("signatures", VERTEX_SIGNATURE, "tool_turn"),
    ),
    "first_call_placeholder": ReceiptPlaceholder("signatures", SIGNATURE, SKIP_SIGNATURE_VALIDATOR),
}
_NOT_GOOGLE = (("extra_content", "google"), ("extra_content", "vertex"))

# Every receipt some provider issues, as the evidence profile looks for them: Google's thought
# signatures (also as Vertex reports them), OpenRouter's and Vercel's gateway's
# reasoning_details, and the reasoning_content of tool-calling turns that DeepSeek, Kimi, GLM
# and Qwen thinking models require back ("thinking is enabled but reasoning_content is
# missing"). Each is only ever returned to the upstream that issued it.
_OBSERVED = (
    ReceiptRule("signatures", SIGNATURE, "call"),
    ReceiptRule("signatures", VERTEX_SIGNATURE, "call"),
    ReceiptRule("signatures", SIGNATURE, "text_turn"),
    ReceiptRule("signatures", VERTEX_SIGNATURE, "text_turn"),
    ReceiptRule("signatures", SIGNATURE, "tool_turn"),
    ReceiptRule("signatures", VERTEX_SIGNATURE, "tool_turn"),
    ReceiptRule("reasoning_details", ("reasoning_details",), "tool_turn", "by_index"),
    ReceiptRule("reasoning_details", ("reasoning_details",), "text_turn", "by_index"),
    ReceiptRule("reasoning_content", ("reasoning_content",), "tool_turn", "concat"),
)
_EVIDENCE: _ReceiptFields = {
    "receipts": _OBSERVED,
    "foreign_metadata": _NOT_GOOGLE,
    "foreign_kept_where_issued": True,
}

# Gemini's OpenAI endpoint answers 400 INVALID_ARGUMENT "Invalid JSON payload received. Unknown
# name \"store\": Cannot find field." (Routstr/routstr-core#505), the same for
# `prompt_cache_key` (leookun/cursor-byok#112): OpenAI SDK clients and agents send both.
_GEMINI_PARAMETERS = (ParameterRule("store"), ParameterRule("prompt_cache_key"))
# Mistral validates with pydantic and forbids extras: 422 `extra_forbidden` with loc
# ["body", "max_completion_tokens"] (editor-code-assistant/eca#231) and ["body", "store"]
# (Gitlawb/openclaude#739). Its own name for the limit is `max_tokens`.
_MISTRAL_PARAMETERS = (
    ParameterRule("max_completion_tokens", rename_to="max_tokens"),
    ParameterRule("store"),
)
# Groq: 400 "property 'store' is unsupported, did you mean 'stop'?" (fanenr/chatbot#21).
_GROQ_PARAMETERS = (ParameterRule("store"),)
# Cerebras: 400 "parallel_tool_calls=False is not supported by this model." with param
# `parallel_tool_calls` (agno-agi/agno#4508); true is its default, so only false goes.
_CEREBRAS_PARAMETERS = (ParameterRule("parallel_tool_calls", only_values=(False,)),)

PROFILES: dict[str, ProviderProfile] = {
    # Both build Google's `Schema` (an OpenAPI 3.0 subset) from the tools' parameters.
    # and both refuse a function name outside `[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}`.
    "gemini": ProviderProfile(
        "gemini",
        **_GOOGLE,
        schema_dialect="gemini",
        tool_names="gemini",
        parameters=_GEMINI_PARAMETERS,
    ),
    "vertex": ProviderProfile("vertex", **_GOOGLE, schema_dialect="gemini", tool_names="gemini"),
    # DeepSeek's thinking-mode guide: a tool-calling turn's reasoning_content must come back
    # in every later request (400 otherwise); other turns' reasoning is ignored.
    "deepseek": ProviderProfile(
        "deepseek",
        receipts=(
            ReceiptRule("reasoning_content", ("reasoning_content",), "tool_turn", "concat", True),
        ),
        foreign_metadata=_NOT_GOOGLE,
        # "unknown role: developer" (422, pi#7603).
        messages=MessageRules(developer_role="system"),
        # Its 400 quotes OpenAI's pattern, `^[a-zA-Z0-9_-]+$` (the length bound is OpenAI's).
        tool_names="openai",
        # A system message as content parts (what a cache mark needs): "messages[0]: invalid
        # type: sequence, expected a string" (litellm#6642); it caches prefixes on its own.
        cache_control="dropped",
    ),
    # Mistral's API takes the roles system, user, assistant and tool; call ids of exactly nine
    # alphanumerics (magentic#276, langchain#24668); content or tool_calls, "not both"
    # (langchain#21196), which an empty content beside the calls counts as.
    "mistral": ProviderProfile(
        "mistral",
        **_EVIDENCE,
        parameters=_MISTRAL_PARAMETERS,
        messages=MessageRules(
            developer_role="system", assistant_tool_content="null", tool_call_ids="nine_alnum"
        ),
    ),
    # OpenRouter: reasoning_details go back unchanged, in order, on the assistant message
    # (for Gemini models they carry the thought signature).
    "openrouter": ProviderProfile(
        "openrouter",
        receipts=(
            ReceiptRule("reasoning_details", ("reasoning_details",), "tool_turn", "by_index"),
            ReceiptRule("reasoning_details", ("reasoning_details",), "text_turn", "by_index"),
        ),
        foreign_metadata=_NOT_GOOGLE,
    ),
    # `^[a-zA-Z0-9_-]{1,64}$` for every function name, declared or in the history.
    "openai": ProviderProfile("openai", foreign_metadata=_NOT_GOOGLE, tool_names="openai"),
    # Upstreams whose receipts are whatever they send: vLLM and Kimi serve thinking models that
    # need their reasoning_content back; "generic", the evidence profile, is every other one.
    "vllm": ProviderProfile("vllm", **_EVIDENCE),
    # Moonshot's validator wants a `type` on every schema node and none beside `anyOf`.
    # A tool result as text parts: "invalid type: sequence, expected a string" (kimi-cli#1762).
    "kimi": ProviderProfile(
        "kimi",
        **_EVIDENCE,
        schema_dialect="moonshot",
        messages=MessageRules(tool_content="string"),
    ),
    # Receipts as the evidence profile takes them (these hosts were `generic` before their
    # parameter tables): only what they reject is theirs.
    # Both answer 400 "'messages.0' : for 'role:system' the following must be satisfied
    # [('messages.0' : property 'cache_control' is unsupported)]" (alma-releases#59); Groq also
    # takes a system message's content only as a string (OpenHands#4643).
    "groq": ProviderProfile(
        "groq", **_EVIDENCE, parameters=_GROQ_PARAMETERS, cache_control="dropped"
    ),
    "cerebras": ProviderProfile(
        "cerebras", **_EVIDENCE, parameters=_CEREBRAS_PARAMETERS, cache_control="dropped"
    ),
    "generic": ProviderProfile("generic", **_EVIDENCE),
}

# Host suffix -> profile name.
_HOSTS = (
    ("generativelanguage.googleapis.com", "gemini"),
    ("aiplatform.googleapis.com", "vertex"),
    ("openrouter.ai", "openrouter"),
    ("api.openai.com", "openai"),
    ("api.moonshot.ai", "kimi"),
    ("api.moonshot.cn", "kimi"),
    ("api.deepseek.com", "deepseek"),
    ("api.mistral.ai", "mistral"),
    ("api.groq.com", "groq"),
    ("api.cerebras.ai", "cerebras"),
)


def profile_from_base_url(base_url: str) -> str | None:
    host = (urlsplit(base_url).hostname or "").lower()
    for suffix, name in _HOSTS:
        if host == suffix or host.endswith("." + suffix) or host.endswith("-" + suffix):
            return name
    return None


def profile_for(configured: str, base_url: str, model: object = None) -> ProviderProfile:
    """The profile that applies to one request: configured, else the host's, else the evidence
    profile. The model name decides nothing: behind a gateway `gemini-…` may be served by
    anyone, and a Google upstream may serve a model whose name says nothing."""
    if configured != "auto":
        return PROFILES[configured]
    by_host = profile_from_base_url(base_url)
    return PROFILES[by_host] if by_host is not None else PROFILES["generic"]
