"""A Messages API request -> the chat-completions request the core forwards (phase 1's input).

Pure: no I/O. What the translation decided (ids seen, thinking signatures read or dropped, beta
features ignored) comes back in `Translated` for the caller to count and log. A request the
front refuses raises `MessagesError` carrying Anthropic's status and error body.

Here: the order of it all. `system` and `messages` are conversation.py's, tools and
`tool_choice` tools.py's, sampling, structured output and thinking request_parameters.py's, the
beta features and body fields it cannot honour features.py's tables, the error shape
anthropic_errors.py's. The names this module offered before are importable from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.fronts.messages.anthropic_errors import (
    ERROR_TYPES,
    MessagesError,
    error_body,
    error_type,
)
from proxy.fronts.messages.conversation import chat_messages, system_content
from proxy.fronts.messages.features import (
    BETA_IGNORED,
    BETA_REFUSED,
    IGNORED_FIELDS,
    REFUSED_FIELDS,
    check_betas,
    count_ignored_fields,
    refuse_fields,
)
from proxy.fronts.messages.request_parameters import (
    effort_for_budget,
    map_output_format,
    map_sampling,
    map_thinking,
)
from proxy.fronts.messages.tools import map_tools
from proxy.fronts.messages.translated import ReadToken, Translated

__all__ = [
    "BETA_IGNORED",
    "BETA_REFUSED",
    "ERROR_TYPES",
    "IGNORED_FIELDS",
    "REFUSED_FIELDS",
    "MessagesError",
    "ReadToken",
    "Translated",
    "effort_for_budget",
    "error_body",
    "error_type",
    "translate",
]


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
    refuse_fields(body)
    stream = body.get("stream") is True
    out = Translated({"model": model}, stream, model)
    check_betas(headers or {}, out)
    messages: list[dict[str, Any]] = []
    system = system_content(body.get("system"), "system")
    if system:
        messages.append({"role": "system", "content": system})
    chat_messages(body["messages"], messages, out, read_token)
    chat = out.body
    chat["messages"] = messages
    chat["max_tokens"] = max_tokens
    if stream:
        chat["stream"] = True
        # Usage arrives only when asked for; message_delta carries it (an upstream that refuses
        # the field has it dropped by the parameter learning and sent again).
        chat["stream_options"] = {"include_usage": True}
    map_sampling(body, chat)
    out.stop_sequences = list(chat.get("stop") or ())
    map_tools(body, chat)
    map_thinking(body, chat, out)
    structured = map_output_format(body, chat)
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    # output_config is used when its effort or its format was read.
    used = {"output_config"} if "reasoning_effort" in chat or structured else set()
    count_ignored_fields(body, used, out)
    return out
