"""A Responses request (`POST /v1/responses`) -> the chat-completions request of phase 1.

The mapping follows what Codex CLI, the AI SDK's Responses provider, the Agents SDK and
openai-python send (RESPONSES.md §1 and §3):

- `input`: a string (one user message) or items. Messages with or without `type`; a run of
  assistant-side items (assistant `message`, `function_call`, `custom_tool_call`, `reasoning`)
  is one assistant chat message, its calls' ids the `call_id`s; each `*_call_output` is a
  `tool` message; a reasoning item's `encrypted_content` is a receipt token, read back into the
  receipts of the assistant message of its run; an `item_reference` is looked up in the store.
- `instructions`: the first system message; `developer` messages become `system` ones (chat
  upstreams other than OpenAI's reject or ignore `developer`).
- tools: `function` (`strict` dropped: most chat upstreams reject or ignore it), `custom` as a
  function of one string argument `input`, `namespace` flattened to `ns__name`; hosted tools
  are dropped (Codex's `web_search` with `external_web_access: false` is one).
- `previous_response_id`: the stored transcript, then the new input.
- Codex's `compaction_trigger` (last in `input`): the upstream is asked for a summary of the
  conversation instead, answered as one `compaction` item; a `compaction` item sent back is
  that summary again (compaction.py).

Hints without a chat counterpart are ignored; what would change the answer and cannot be
honoured is refused with OpenAI's 400 `unsupported_parameter`, naming the parameter.

Here: the order of it all. The input items are input_items.py's (their content
input_content.py's), the tools chat_tools.py's, the parameters and the tables of refused and
ignored ones request_parameters.py's, what the translation hands on translation.py's, the
error shape openai_errors.py's. The names this module offered before are importable from it.
"""

from __future__ import annotations

from typing import Any

from proxy.fronts.responses.chat_tools import HOSTED_TOOLS, chat_tools
from proxy.fronts.responses.compaction import summarising
from proxy.fronts.responses.input_items import ASSISTANT_SIDE, CALL_OUTPUTS, input_messages
from proxy.fronts.responses.openai_errors import FrontError, invalid, openai_error, unsupported
from proxy.fronts.responses.request_parameters import IGNORED, map_parameters, refuse
from proxy.fronts.responses.translation import (
    CUSTOM_INPUT,
    NAMESPACE_SEPARATOR,
    Item,
    Lookups,
    Message,
    Translation,
)

__all__ = [
    "ASSISTANT_SIDE",
    "CALL_OUTPUTS",
    "CUSTOM_INPUT",
    "HOSTED_TOOLS",
    "IGNORED",
    "NAMESPACE_SEPARATOR",
    "FrontError",
    "Item",
    "Lookups",
    "Message",
    "Translation",
    "chat_tools",
    "invalid",
    "openai_error",
    "translate",
    "unsupported",
]


async def translate(body: dict[str, Any], lookups: Lookups) -> Translation:
    """The chat request for a Responses request; raises FrontError for one it refuses."""
    refuse(body)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise FrontError(400, "model: required", "missing_required_parameter", "model")
    translation = Translation(
        chat={"model": model},
        stream=body.get("stream") is True,
        store=body.get("store") is not False,
        model=model,
    )
    tools = chat_tools(body.get("tools"), translation)
    messages: list[Message] = []
    previous = body.get("previous_response_id")
    if previous is not None:
        if not isinstance(previous, str):
            raise invalid("previous_response_id", "must be a string")
        stored = await lookups.transcript(previous)
        if stored is None:
            raise FrontError(
                400,
                f"Previous response with id '{previous}' not found.",
                "previous_response_not_found",
                "previous_response_id",
            )
        messages.extend(stored)
        translation.count("responses_previous_response")
    messages.extend(await input_messages(body.get("input"), lookups, translation))
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        translation.instructions = {"role": "system", "content": instructions}
        messages.insert(0, translation.instructions)
    chat = translation.chat
    chat["messages"] = messages
    if translation.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    if tools:
        chat["tools"] = tools
    map_parameters(body, chat, translation, tools)
    if translation.compacting:
        if not lookups.token_scope:
            raise FrontError(
                400,
                "a compaction's summary is kept per key: send the request with one",
                "invalid_request",
                f"input[{len(body['input']) - 1}]",
            )
        summarising(translation)
    return translation
