"""A Messages API request -> the chat-completions request the core forwards (phase 1's input).

Pure: no I/O. What the translation decided (ids seen, thinking signatures read or dropped, beta
features ignored) comes back in `Translated` for the caller to count and log. A request the
front refuses raises `MessagesError` carrying Anthropic's status and error body.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.fronts.translator import Refused
from proxy.wire import json_codec

ReadToken = Callable[[str], str | None]
"""A thinking block's signature -> the receipt key it carries, None when foreign or tampered
(receipt_tokens.read bound to the exchange's scope)."""

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status (its SDKs pick their exception class by the
    status, Claude Code shows the type)."""
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


class MessagesError(Refused):
    """A request the Messages front refuses, with the status and body Anthropic would send."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message, status, error_body(status, message))


# anthropic-beta features, by what the front does with them. Features that only change how
# Anthropic's own servers bill, cache, count or display are ignored (the chat upstream has no
# such thing and the answer is the same); features that need Anthropic's servers to run
# something are refused, so a client never believes a tool ran that nobody ran. A feature in
# neither list is ignored and counted (`anthropic_beta_unknown`): Claude Code adds new ones with
# every release, and refusing them would refuse Claude Code.
BETA_IGNORED = (
    "claude-code-",
    "interleaved-thinking-",
    "context-management-",
    "mid-conversation-tool-changes-",
    "thinking-token-count-",
    "advanced-tool-use-",
    "effort-",
    "thinking-display-updates-",
    "prompt-caching-",
    "extended-cache-ttl-",
    "fine-grained-tool-streaming-",
    "token-efficient-tools-",
    "output-128k-",
    "context-1m-",
    "token-counting-",
    "message-batches-",
    "oauth-",
)
BETA_REFUSED = (
    "computer-use-",
    "code-execution-",
    "files-api-",
    "mcp-client-",
    "skills-",
    "web-fetch-",
    "search-results-",
)

# Body fields with no chat equivalent that change nothing a chat upstream could honour.
IGNORED_FIELDS = frozenset(
    {"output_config", "context_management", "service_tier", "cache_control", "container"}
)
REFUSED_FIELDS = {"mcp_servers": "MCP servers run on Anthropic's side; this proxy has none"}


@dataclass
class Translated:
    """The chat request and what the translation decided on the way."""

    body: dict[str, Any]
    stream: bool
    model: str
    counts: dict[str, int] = field(default_factory=dict)
    receipt_keys: dict[int, str] = field(default_factory=dict)
    """Chat message position -> the receipt key its thinking block's signature carried."""
    stop_sequences: list[str] = field(default_factory=list)
    """What `stop_reason: "stop_sequence"` may name."""

    def count(self, kind: str, amount: int = 1) -> None:
        if amount:
            self.counts[kind] = self.counts.get(kind, 0) + amount

    @property
    def chat(self) -> dict[str, Any]:
        """The chat request (the name every front's translation gives it)."""
        return self.body

    def receipt_messages(self) -> list[tuple[dict[str, Any], str]]:
        """(assistant message, receipt key) for every thinking signature read back."""
        messages = self.body["messages"]
        return [(messages[position], key) for position, key in self.receipt_keys.items()]


def _foreign(token: str) -> None:
    return None


def translate(
    body: Any, headers: Mapping[str, str] | None = None, read_token: ReadToken = _foreign
) -> Translated:
    """The chat-completions request for a Messages request, or MessagesError."""
    if not isinstance(body, dict):
        raise MessagesError("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise MessagesError("model: Field required")
    if not isinstance(body.get("messages"), list):
        raise MessagesError("messages: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise MessagesError("max_tokens: Field required (a positive integer)")
    for name, why in REFUSED_FIELDS.items():
        if body.get(name):
            raise MessagesError(f"{name}: not supported by this proxy ({why})")
    stream = body.get("stream") is True
    out = Translated({"model": model}, stream, model)
    _check_betas(headers or {}, out)
    messages: list[dict[str, Any]] = []
    system = _system_text(body.get("system"), "system")
    if system:
        messages.append({"role": "system", "content": system})
    _messages(body["messages"], messages, out, read_token)
    chat = out.body
    chat["messages"] = messages
    chat["max_tokens"] = max_tokens
    if stream:
        chat["stream"] = True
        # Usage arrives only when asked for; message_delta carries it (an upstream that refuses
        # the field has it dropped by the parameter learning and sent again).
        chat["stream_options"] = {"include_usage": True}
    _sampling(body, chat)
    out.stop_sequences = list(chat.get("stop") or ())
    _tools(body, chat)
    _thinking(body, chat, out)
    structured = _output_format(body, chat)
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    # output_config is used when its effort or its format was read.
    used = {"output_config"} if "reasoning_effort" in chat or structured else set()
    for name in IGNORED_FIELDS - used:
        if name in body:
            out.count("messages_field_ignored")
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_betas(headers: Mapping[str, str], out: Translated) -> None:
    raw = headers.get("anthropic-beta") or ""
    for feature in (f.strip() for f in raw.split(",")):
        if not feature:
            continue
        if feature.startswith(BETA_REFUSED):
            raise MessagesError(
                f"anthropic-beta: {feature} needs Anthropic's own servers; this proxy refuses it"
            )
        if not feature.startswith(BETA_IGNORED):
            out.count("anthropic_beta_unknown")


def _system_text(system: Any, where: str) -> str:
    """A system prompt as a string or text blocks (their cache_control has no chat twin)."""
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        texts = []
        for block in system:
            if not isinstance(block, dict) or block.get("type") != "text":
                raise MessagesError(f"{where}: only text blocks are accepted")
            texts.append(_str(block.get("text"), f"{where}.text"))
        return "\n\n".join(texts)
    raise MessagesError(f"{where}: must be a string or a list of text blocks")


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise MessagesError(f"{where}: must be a string")
    return value


def _messages(
    given: list[Any], messages: list[dict[str, Any]], out: Translated, read_token: ReadToken
) -> None:
    issued: set[str] = set()  # tool_use ids the assistant turns so far issued
    for position, message in enumerate(given):
        where = f"messages.{position}"
        if not isinstance(message, dict):
            raise MessagesError(f"{where}: must be an object")
        role = message.get("role")
        content = message.get("content")
        if role == "system":  # Claude Code sends one inside messages, besides the top level
            messages.append({"role": "system", "content": _system_text(content, where)})
        elif role == "user":
            messages.extend(_user(content, where, issued))
        elif role == "assistant":
            assistant, key = _assistant(content, where, out, read_token)
            for call in assistant.get("tool_calls", ()):
                issued.add(call["id"])
            if key is not None:
                out.receipt_keys[len(messages)] = key
            messages.append(assistant)
        else:
            raise MessagesError(f"{where}.role: must be 'user' or 'assistant'")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MessagesError(f"{where}.content: must be a string or a list of blocks")
    for index, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise MessagesError(f"{where}.content.{index}: a block needs a type")
    return content


def _user(content: Any, where: str, issued: set[str]) -> list[dict[str, Any]]:
    """A user turn: its tool results first, as `tool` messages in order (a chat upstream wants
    them right after the assistant's calls), then the rest as one user message."""
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(_blocks(content, where)):
        here = f"{where}.content.{index}"
        kind = block["type"]
        if kind == "tool_result":
            tool_message, images = _tool_result(block, here, issued)
            tools.append(tool_message)
            parts.extend(images)
        elif kind == "text":
            parts.append({"type": "text", "text": _str(block.get("text"), f"{here}.text")})
        elif kind == "image":
            parts.append(_image(block.get("source"), here))
        else:
            raise MessagesError(f"{here}: block type {kind!r} is not supported in a user turn")
    out = list(tools)
    if parts:
        # One text block as a string (what every chat upstream takes); several stay parts.
        single = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": "user", "content": parts[0]["text"] if single else parts})
    return out


def _image(source: Any, where: str) -> dict[str, Any]:
    if isinstance(source, dict) and source.get("type") == "base64":
        media = _str(source.get("media_type"), f"{where}.source.media_type")
        data = _str(source.get("data"), f"{where}.source.data")
        return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
    if isinstance(source, dict) and source.get("type") == "url":
        url = _str(source.get("url"), f"{where}.source.url")
        return {"type": "image_url", "image_url": {"url": url}}
    raise MessagesError(f"{where}.source: an image's source must be base64 or url")


def _tool_result(
    block: dict[str, Any], where: str, issued: set[str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A `tool` message, and the images the result held (a chat `tool` message takes text
    only; they follow in the user message). `is_error` has no chat field: the text says it."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or call_id not in issued:
        raise MessagesError(
            f"{where}: unexpected tool_use_id {call_id!r} in tool_result blocks: "
            "each tool_result needs a tool_use block with that id in an earlier assistant turn"
        )
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for index, part in enumerate(_blocks(block.get("content", ""), where)):
        if part["type"] == "text":
            texts.append(_str(part.get("text"), f"{where}.content.{index}.text"))
        elif part["type"] == "image":
            images.append(_image(part.get("source"), f"{where}.content.{index}"))
        else:
            raise MessagesError(f"{where}.content.{index}: {part['type']!r} is not supported")
    text = "".join(texts)
    if block.get("is_error") is True:
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _assistant(
    content: Any, where: str, out: Translated, read_token: ReadToken
) -> tuple[dict[str, Any], str | None]:
    """An assistant turn: text, its calls with their ids as issued, and the receipt key its
    thinking block's signature carries (the thinking text itself is not sent: the upstream's
    own receipt, verbatim from the store, goes back in its place)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    key: str | None = None
    for index, block in enumerate(_blocks(content, where)):
        here = f"{where}.content.{index}"
        kind = block["type"]
        if kind == "text":
            texts.append(_str(block.get("text"), f"{here}.text"))
        elif kind == "tool_use":
            calls.append(_call(block, here))
        elif kind == "thinking":
            signature = block.get("signature")
            found = read_token(signature) if isinstance(signature, str) else None
            if found is None:
                out.count("thinking_signature_dropped")
            else:
                key = found
        elif kind == "redacted_thinking":
            out.count("thinking_signature_dropped")  # never issued by this proxy
        else:
            raise MessagesError(
                f"{here}: block type {kind!r} is not supported in an assistant turn"
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message, key


def _call(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = _str(block.get("id"), f"{where}.id")
    name = _str(block.get("name"), f"{where}.name")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise MessagesError(f"{where}.input: must be an object")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json_codec.dumps(arguments).decode()},
    }


def _sampling(body: dict[str, Any], chat: dict[str, Any]) -> None:
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


def _output_format(body: dict[str, Any], chat: dict[str, Any]) -> bool:
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


def _tools(body: dict[str, Any], chat: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools:
        if not isinstance(tools, list):
            raise MessagesError("tools: must be a list")
        chat["tools"] = [_tool(tool, f"tools.{i}") for i, tool in enumerate(tools)]
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, dict):
        raise MessagesError("tool_choice: must be an object")
    kind = choice.get("type")
    if kind == "auto":
        chat["tool_choice"] = "auto"
    elif kind == "any":
        chat["tool_choice"] = "required"
    elif kind == "none":
        chat["tool_choice"] = "none"
    elif kind == "tool":
        name = _str(choice.get("name"), "tool_choice.name")
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise MessagesError(f"tool_choice.type: {kind!r} is not auto, any, tool or none")
    if choice.get("disable_parallel_tool_use") is True and chat.get("tools"):
        chat["parallel_tool_calls"] = False


def _tool(tool: Any, where: str) -> dict[str, Any]:
    """A client tool as a function. Anthropic's server tools (web search, code execution, its
    versioned bash and editor types) would need Anthropic to run them: refused."""
    if not isinstance(tool, dict):
        raise MessagesError(f"{where}: must be an object")
    if tool.get("type") not in (None, "custom"):
        raise MessagesError(f"{where}.type: {tool.get('type')!r} runs on Anthropic's servers")
    function: dict[str, Any] = {"name": _str(tool.get("name"), f"{where}.name")}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise MessagesError(f"{where}.input_schema: Field required")
    function["parameters"] = schema
    return {"type": "function", "function": function}


def effort_for_budget(budget: int) -> str:
    """Anthropic's thinking budget as a chat reasoning effort: OpenAI's own mapping of budgets
    to efforts has no public table, so these are round cut points (1k-4k low, to 16k medium)."""
    if budget < 4096:
        return "low"
    if budget < 16384:
        return "medium"
    return "high"


def _thinking(body: dict[str, Any], chat: dict[str, Any], out: Translated) -> None:
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
