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

Hints without a chat counterpart are ignored; what would change the answer and cannot be
honoured is refused with OpenAI's 400 `unsupported_parameter`, naming the parameter.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.fronts.receipt_tokens import read as read_token
from proxy.fronts.translator import Refused
from proxy.fronts.turns import restore_turns

Message = dict[str, Any]
Item = dict[str, Any]

NAMESPACE_SEPARATOR = "__"
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "computer",
        "computer_use_preview",
        "mcp",
        "image_generation",
        "local_shell",
        "shell",
        "apply_patch",
    }
)
IGNORED = frozenset(
    {
        "prompt_cache_key",
        "prompt_cache_retention",
        "client_metadata",
        "include",
        "truncation",
        "service_tier",
        "store",
        "metadata",
        "safety_identifier",
        "user",
        "top_logprobs",
        "stream_options",
    }
)
"""Hints: accepted and not forwarded (a chat upstream has nothing to do with them)."""
ASSISTANT_SIDE = frozenset({"function_call", "custom_tool_call", "reasoning"})
CALL_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
CUSTOM_INPUT = "input"


class FrontError(Refused):
    """A request the front refuses: the HTTP status and OpenAI's error body."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message, status, openai_error(message, code, param))


def openai_error(
    message: str, code: str, param: str | None = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    """OpenAI's error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def unsupported(param: str, why: str) -> FrontError:
    return FrontError(400, f"{param}: {why}", "unsupported_parameter", param)


def invalid(param: str, why: str) -> FrontError:
    return FrontError(400, f"{param}: {why}", "invalid_value", param)


@dataclass
class Lookups:
    """What the translation reads from the store (store.py's ResponsesStore in the server; plain
    functions in the tests)."""

    transcript: Callable[[str], Awaitable[list[Message] | None]]
    turn: Callable[[str], Awaitable[Message | None]]
    items: Callable[[list[str]], Awaitable[dict[str, Item]]]
    token_scope: str = ""


@dataclass
class Translation:
    """The chat request, and what the events translator and the store write need to know."""

    chat: dict[str, Any]
    stream: bool
    store: bool
    model: str
    instructions: Message | None = None
    custom_tools: frozenset[str] = frozenset()
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Flattened name -> (namespace, name)."""
    counts: dict[str, int] = field(default_factory=dict)
    """What the bridge did, by repair kind (booked on the exchange)."""

    def count(self, kind: str, amount: int = 1) -> None:
        if amount:
            self.counts[kind] = self.counts.get(kind, 0) + amount

    def transcript_without_instructions(self, messages: list[Message]) -> list[Message]:
        """`messages` (what went upstream) without the `instructions` this request put first.
        By value: the request repairs may have rebuilt the list (and its messages)."""
        if self.instructions is not None and messages and messages[0] == self.instructions:
            return messages[1:]
        return list(messages)


async def translate(body: dict[str, Any], lookups: Lookups) -> Translation:
    """The chat request for a Responses request; raises FrontError for one it refuses."""
    _refuse(body)
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
        stored = await lookups.transcript(previous) if isinstance(previous, str) else None
        if stored is None:
            raise FrontError(
                400,
                f"Previous response with id '{previous}' not found.",
                "previous_response_not_found",
                "previous_response_id",
            )
        messages.extend(stored)
        translation.count("responses_previous_response")
    messages.extend(await _messages(body.get("input"), lookups, translation))
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
    _parameters(body, chat, translation, tools)
    return translation


def _refuse(body: dict[str, Any]) -> None:
    if body.get("background") is True:
        raise unsupported("background", "background responses are not supported by this proxy")
    if body.get("conversation") is not None:
        raise unsupported("conversation", "conversations are not supported by this proxy")
    if body.get("prompt") is not None:
        raise unsupported("prompt", "prompt templates are not supported by this proxy")
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in HOSTED_TOOLS:
        raise unsupported(
            "tool_choice", f"the hosted tool {choice.get('type')!r} cannot be forced here"
        )


# ── input ────────────────────────────────────────────────────────────────────


class _Folder:
    """Builds chat messages from items, folding each assistant-side run into one message."""

    def __init__(self, lookups: Lookups, translation: Translation) -> None:
        self.lookups = lookups
        self.translation = translation
        self.messages: list[Message] = []
        self.assistant: Message | None = None
        self.receipts: list[tuple[Message, str]] = []
        """(assistant message, receipt key) for each valid token: restored at the end."""

    def open_assistant(self) -> Message:
        if self.assistant is None:
            self.assistant = {"role": "assistant", "content": None}
            self.messages.append(self.assistant)
        return self.assistant

    def close_assistant(self) -> None:
        self.assistant = None

    def add(self, item: Item, where: str) -> None:
        kind = item.get("type")
        if kind is None or kind == "message":
            self._message(item, where)
        elif kind in ("function_call", "custom_tool_call"):
            self._call(item, where)
        elif kind in CALL_OUTPUTS:
            self.close_assistant()
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise invalid(f"{where}.call_id", "required")
            self.messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": _text(item.get("output"))}
            )
        elif kind == "reasoning":
            self._reasoning(item)
        else:
            raise invalid(f"{where}.type", f"input items of type {kind!r} are not supported")

    def _message(self, item: Item, where: str) -> None:
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise invalid(f"{where}.role", f"unknown role {role!r}")
        content = _content(item.get("content"), where)
        if role == "assistant":
            message = self.open_assistant()
            text = content if isinstance(content, str) else _joined(content)
            message["content"] = (message["content"] or "") + text
            return
        self.close_assistant()
        if role == "developer":
            role = "system"
            self.translation.count("responses_developer_role")
        self.messages.append({"role": role, "content": content})

    def _call(self, item: Item, where: str) -> None:
        call_id, name = item.get("call_id"), item.get("name")
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise invalid(where, "a call needs its call_id and name")
        if item.get("type") == "custom_tool_call":
            arguments = _dumps({CUSTOM_INPUT: _text(item.get("input"))})
        else:
            sent = item.get("arguments")
            arguments = sent if isinstance(sent, str) else _dumps(sent or {})
        namespace = item.get("namespace")
        if isinstance(namespace, str) and namespace:
            name = f"{namespace}{NAMESPACE_SEPARATOR}{name}"
        message = self.open_assistant()
        message.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )

    def _reasoning(self, item: Item) -> None:
        token = item.get("encrypted_content")
        message = self.open_assistant()
        if not isinstance(token, str) or not token:
            return  # summary-only (the AI SDK, rewritten history): the store's keys still apply
        key = read_token(token, self.lookups.token_scope) if self.lookups.token_scope else None
        if key is None:
            self.translation.count("responses_foreign_receipt_token")
            return
        self.receipts.append((message, key))


async def _messages(input_: Any, lookups: Lookups, translation: Translation) -> list[Message]:
    if input_ is None:
        return []
    if isinstance(input_, str):
        return [{"role": "user", "content": input_}]
    if not isinstance(input_, list):
        raise invalid("input", "must be a string or a list of items")
    references = [
        item["id"]
        for item in input_
        if isinstance(item, dict)
        and item.get("type") == "item_reference"
        and isinstance(item.get("id"), str)
    ]
    found = await lookups.items(references) if references else {}
    folder = _Folder(lookups, translation)
    for position, item in enumerate(input_):
        where = f"input[{position}]"
        if not isinstance(item, dict):
            raise invalid(where, "must be an object")
        if item.get("type") == "item_reference":
            resolved = found.get(item.get("id"))  # type: ignore[arg-type]
            if resolved is None:
                raise FrontError(
                    400, f"Item with id '{item.get('id')}' not found.", "item_not_found", where
                )
            translation.count("responses_item_reference")
            item = resolved
        folder.add(item, where)
    restored, unknown = await restore_turns(folder.receipts, lookups.turn)
    translation.count("responses_receipt_token_unknown", unknown)
    translation.count("responses_receipts_restored", restored)
    return folder.messages


def _content(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A Responses content -> chat content: one text stays a string, images become parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"{where}.content", "must be a string or a list of parts")
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif kind == "input_image":
            url = part.get("image_url") or part.get("file_id")
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise invalid(f"{where}.content", f"content parts of type {kind!r} are not supported")
    if all(part["type"] == "text" for part in parts) and len(parts) <= 1:
        return parts[0]["text"] if parts else ""
    return parts


def _joined(parts: list[dict[str, Any]]) -> str:
    return "".join(str(part.get("text") or "") for part in parts if part.get("type") == "text")


def _text(output: Any) -> str:
    """A call's output (a string, or `input_text` parts) as a tool message's text."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(
            str(part.get("text") or "")
            for part in output
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")
        )
    return "" if output is None else _dumps(output)


# ── tools and parameters ─────────────────────────────────────────────────────


def chat_tools(tools: Any, translation: Translation) -> list[dict[str, Any]]:
    """Responses tools as chat functions; the translation learns which are custom and which
    were flattened from a namespace (the events name them back)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid("tools", "must be a list")
    out: list[dict[str, Any]] = []
    custom: set[str] = set()
    for position, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            out.append(_function(tool, tool.get("name"), f"tools[{position}]"))
        elif kind == "custom":
            name = tool.get("name")
            described = str(tool.get("description") or "") + _grammar_note(tool.get("format"))
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": described,
                        "parameters": {
                            "type": "object",
                            "properties": {
                                CUSTOM_INPUT: {
                                    "type": "string",
                                    "description": "The tool's whole input, as free text.",
                                }
                            },
                            "required": [CUSTOM_INPUT],
                        },
                    },
                }
            )
            custom.add(str(name))
            translation.count("responses_custom_tool")
        elif kind == "namespace":
            namespace = tool.get("name")
            inner = tool.get("tools") or tool.get("functions") or []
            for member in inner if isinstance(inner, list) else ():
                if not isinstance(member, dict):
                    continue
                flat = f"{namespace}{NAMESPACE_SEPARATOR}{member.get('name')}"
                out.append(_function(member, flat, f"tools[{position}]"))
                translation.namespaced[flat] = (str(namespace), str(member.get("name")))
            translation.count("responses_namespace_tool")
        elif kind in HOSTED_TOOLS or isinstance(kind, str):
            translation.count("responses_hosted_tool_dropped")
        else:
            raise invalid(f"tools[{position}].type", "required")
    translation.custom_tools = frozenset(custom)
    return out


def _grammar_note(fmt: Any) -> str:
    """A custom tool's grammar, told to a model that cannot be constrained by it."""
    if not isinstance(fmt, dict) or fmt.get("type") != "grammar":
        return ""
    definition = fmt.get("definition")
    if not isinstance(definition, str) or not definition:
        return ""
    syntax = fmt.get("syntax") or "grammar"
    return f"\n\nThe input must follow this {syntax} grammar:\n{definition}"


def _function(tool: dict[str, Any], name: Any, where: str) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise invalid(f"{where}.name", "required")
    function: dict[str, Any] = {"name": name}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def _parameters(
    body: dict[str, Any], chat: dict[str, Any], translation: Translation, tools: list[Any]
) -> None:
    for name in (
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "seed",
        "frequency_penalty",
        "presence_penalty",
    ):
        if body.get(name) is not None:
            chat[name] = body[name]
    if not tools:
        chat.pop("parallel_tool_calls", None)  # some upstreams refuse it without tools
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("effort"), str):
        chat["reasoning_effort"] = reasoning["effort"]
    choice = _tool_choice(body.get("tool_choice"), chat, translation)
    if choice is not None and tools:
        chat["tool_choice"] = choice
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_object":
            chat["response_format"] = {"type": "json_object"}
        elif fmt.get("type") == "json_schema":
            schema = {k: fmt[k] for k in ("name", "schema", "description", "strict") if k in fmt}
            chat["response_format"] = {"type": "json_schema", "json_schema": schema}


def _tool_choice(choice: Any, chat: dict[str, Any], translation: Translation) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if not isinstance(choice, dict):
        raise invalid("tool_choice", "must be a string or an object")
    kind = choice.get("type")
    if kind in ("function", "custom"):
        name = choice.get("name")
        namespace = choice.get("namespace")
        if isinstance(namespace, str) and namespace:
            name = f"{namespace}{NAMESPACE_SEPARATOR}{name}"
        return {"type": "function", "function": {"name": name}}
    if kind == "allowed_tools":
        allowed = {t.get("name") for t in choice.get("tools") or () if isinstance(t, dict)}
        tools = chat.get("tools")
        if tools and allowed:
            chat["tools"] = [t for t in tools if t["function"]["name"] in allowed] or tools
        return choice.get("mode") or "auto"
    raise invalid("tool_choice", f"unknown tool_choice type {kind!r}")


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
