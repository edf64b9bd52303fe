"""A fake vLLM / llama.cpp server whose tool parser missed: the model's tool-call markup arrives
as plain text (`delta.content` / `message.content`), for the proxy's text tool-call repair
(proxy/repair/repairs/text_tool_calls.py) to turn into real `tool_calls`.

The request's `model` picks what the "model" writes: `FAMILY[/VARIANT...]`, components split on
`/` (unknown ones are ignored, so a test can add one for a route's model pattern to match):

- FAMILY: `hermes` (`<tool_call>{json}</tool_call>`), `qwen3_coder`
  (`<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>`, every value
  bare text), `kimi_k2` (`<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
  <|tool_call_argument_begin|>{json}<|tool_call_end|><|tool_calls_section_end|>`), `glm`
  (GLM-4.5: `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`),
  `deepseek` (V3.1: `<|tool calls begin|><|tool call begin|>NAME<|tool sep|>{json}
  <|tool call end|><|tool calls end|>`, written here with ASCII `|` and spaces for the
  fullwidth bar and the U+2581 separator of the real tokens), `mistral` (tokenizer v11+:
  `[TOOL_CALLS]NAME[ARGS]{json}`, no closing marker), `minimax_m2` (`<minimax:tool_call>
  <invoke name="NAME"><parameter name="K">V</parameter></invoke></minimax:tool_call>`) or
  `deepseek_v41` (DeepSeek V4.1's DSML: `<|DSML| calls><|DSML| invoke name="NAME"><|DSML|
  parameter name="K" string="true">V</|DSML| parameter></|DSML| invoke></|DSML| calls>`), each
  with the line breaks its chat template writes; see FAMILIES.
- VARIANT `prefixed`: the model writes PREFIX before the markup;
  `parallel`: two calls (PARIS, then TOKYO);
  `invalid`: arguments that fail WEATHER_SCHEMA (`days` is not an integer).

**First request** (the last message is not a `tool` message): the markup is the answer,
whether or not the request declared tools (a model told of tools in its system prompt writes
them all the same). Streamed: a role chunk with empty content, then the text in small pieces
(PIECE_SIZES, so every opener, name and JSON object is cut inside), each its own SSE event,
then a chunk with `finish_reason: "stop"` and `data: [DONE]`. Non-streamed: the whole text as
`message.content`, `tool_calls: []` (vLLM's shape when no parser ran), finish "stop".

**Follow-up** (the last message is a `tool` message): the history must be what a chat template
renders (`history_problems`): the assistant message before the tool messages has `tool_calls`,
each with a non-empty `id`, `type: "function"`, `function.name` and `function.arguments` as a
JSON string (an object), the calls the model wrote (same names and arguments; for Kimi K2 the
ids it wrote, `functions.NAME:N`, which its template renders back), its `content` holds no
tool-call markup (the template would render each call twice), every call has exactly one
`tool` message with its `tool_call_id`, and for Mistral every id is 9 letters and digits
(mistral-common refuses any other). Otherwise HTTP 400 with an OpenAI-style error body
(`invalid_request_error`), and the problems are kept in `rejections`. When it is, the answer is
plain text that uses the tool results (`final_answer`).

Every request is kept in `requests`.

`MarkupUpstream(parser=True)` is the control: the same server with a tool parser that worked
(as vLLM's does when it is configured): on a first request that declares the tool, the calls
come as real `tool_calls` (streamed: an opening entry with index, id, type and name, then the
arguments in fragments), any text before them as content, finish "tool_calls". A test run
against it checks that the tests' own checks accept a correct answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.fake_upstream import RecordedRequest
from tests.support.servers import serve_in_thread

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"zone": {"type": "string"}},
    "required": ["zone"],
}
TOOL_SCHEMAS = {"get_weather": WEATHER_SCHEMA, "get_time": TIME_SCHEMA}

PARIS: dict[str, Any] = {"city": "Paris", "days": 3}
TOKYO: dict[str, Any] = {"city": "Tokyo", "days": 1}
INVALID: dict[str, Any] = {"city": "Paris", "days": "three"}
PREFIX = "Let me check the forecast first.\n"
"""What a `prefixed` model writes before its markup."""

PIECE_SIZES = (3, 1, 5, 2, 7, 4)
"""The streamed text is cut into pieces of these sizes, in turn."""


def openai_tools(*names: str) -> list[dict[str, Any]]:
    """The tools as an OpenAI-style request declares them."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"the {name} tool",
                "parameters": TOOL_SCHEMAS[name],
            },
        }
        for name in names
    ]


def final_answer(results: Sequence[str]) -> str:
    """The follow-up's answer, from the `tool` messages' contents in order."""
    return "Here is what the tools said: " + " | ".join(results)


# ── the families' markup ─────────────────────────────────────────────────────


def _json(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)  # as models write it: ", " and ": "


@dataclass(frozen=True)
class Family:
    name: str
    render: Callable[[list[tuple[str, dict[str, Any]]]], str]
    """The markup of these calls (name, arguments), as the model writes it."""
    markers: tuple[str, ...]
    """Texts of the markup that must not be left in `content` once it became calls."""
    call_id: Callable[[str, int], str] | None = None
    """The id the model writes for its call at a position, when the family writes one."""
    id_rule: re.Pattern[str] | None = None
    """What the family's server accepts as a call id on the follow-up, when it is particular."""

    def made_id(self, digest: str) -> str:
        """An id made up for a call (the control's parser), of a shape the server accepts."""
        return digest[:9] if self.id_rule is MISTRAL_ID else f"call_{digest[:24]}"


MISTRAL_ID = re.compile(r"[a-zA-Z0-9]{9}")


def _hermes(calls: list[tuple[str, dict[str, Any]]]) -> str:
    # Qwen's templates put a line break between two calls; so do Qwen3-Coder's and GLM's.
    return "\n".join(
        f'<tool_call>\n{{"name": "{name}", "arguments": {_json(args)}}}\n</tool_call>'
        for name, args in calls
    )


def _qwen3_coder(calls: list[tuple[str, dict[str, Any]]]) -> str:
    def parameter(key: str, value: Any) -> str:
        return f"<parameter={key}>\n{value}\n</parameter>\n"

    return "\n".join(
        f"<tool_call>\n<function={name}>\n"
        + "".join(parameter(k, v) for k, v in args.items())
        + "</function>\n</tool_call>"
        for name, args in calls
    )


def _kimi_id(name: str, position: int) -> str:
    return f"functions.{name}:{position}"


def _kimi_k2(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return (
        "<|tool_calls_section_begin|>"
        + "".join(
            f"<|tool_call_begin|>{_kimi_id(name, i)}<|tool_call_argument_begin|>"
            f"{_json(args)}<|tool_call_end|>"
            for i, (name, args) in enumerate(calls)
        )
        + "<|tool_calls_section_end|>"
    )


def _glm(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "\n".join(
        f"<tool_call>{name}\n"
        + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in args.items())
        + "</tool_call>"
        for name, args in calls
    )


def _deepseek_marker(words: str) -> str:
    # The fullwidth bar and the U+2581 separator of DeepSeek's special tokens.
    return "<\uff5c" + words.replace(" ", "\u2581") + "\uff5c>"


def _deepseek(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return (
        _deepseek_marker("tool calls begin")
        + "".join(
            _deepseek_marker("tool call begin")
            + name
            + _deepseek_marker("tool sep")
            + _json(args)
            + _deepseek_marker("tool call end")
            for name, args in calls
        )
        + _deepseek_marker("tool calls end")
    )


def _mistral(calls: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(f"[TOOL_CALLS]{name}[ARGS]{_json(args)}" for name, args in calls)


def _minimax_m2(calls: list[tuple[str, dict[str, Any]]]) -> str:
    def invoke(name: str, args: dict[str, Any]) -> str:
        parameters = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in args.items())
        return f'<invoke name="{name}">\n{parameters}</invoke>\n'

    return (
        "<minimax:tool_call>\n"
        + "".join(invoke(name, args) for name, args in calls)
        + "</minimax:tool_call>"
    )


def _dsml_v41_tag(name: str) -> str:
    # DeepSeek V4.1's encoder: the fullwidth-barred marker, then a space, in every tag.
    return "\uff5cDSML\uff5c " + name


def _deepseek_v41(calls: list[tuple[str, dict[str, Any]]]) -> str:
    def parameter(key: str, value: Any) -> str:
        typed = "true" if isinstance(value, str) else "false"
        text = value if isinstance(value, str) else _json(value)
        return (
            f'<{_dsml_v41_tag("parameter")} name="{key}" string="{typed}">{text}'
            f"</{_dsml_v41_tag('parameter')}>\n"
        )

    def invoke(name: str, args: dict[str, Any]) -> str:
        parameters = "".join(parameter(k, v) for k, v in args.items())
        return (
            f'<{_dsml_v41_tag("invoke")} name="{name}">\n{parameters}</{_dsml_v41_tag("invoke")}>\n'
        )

    block = _dsml_v41_tag("calls")
    return f"<{block}>\n" + "".join(invoke(n, a) for n, a in calls) + f"</{block}>"


FAMILIES: dict[str, Family] = {
    "hermes": Family("hermes", _hermes, ("<tool_call>", "</tool_call>", '"arguments"')),
    "qwen3_coder": Family(
        "qwen3_coder", _qwen3_coder, ("<tool_call>", "<function=", "<parameter=", "</function>")
    ),
    "kimi_k2": Family(
        "kimi_k2",
        _kimi_k2,
        ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.", "<|tool_call_end|>"),
        call_id=_kimi_id,
    ),
    "glm": Family("glm", _glm, ("<tool_call>", "<arg_key>", "<arg_value>", "</tool_call>")),
    "deepseek": Family(
        "deepseek",
        _deepseek,
        tuple(_deepseek_marker(m) for m in ("tool calls begin", "tool call begin", "tool sep")),
    ),
    "mistral": Family("mistral", _mistral, ("[TOOL_CALLS]", "[ARGS]"), id_rule=MISTRAL_ID),
    "minimax_m2": Family(
        "minimax_m2", _minimax_m2, ("<minimax:tool_call>", "<invoke", "<parameter", "</invoke>")
    ),
    "deepseek_v41": Family(
        "deepseek_v41",
        _deepseek_v41,
        tuple(f"<{_dsml_v41_tag(m)}" for m in ("calls", "invoke", "parameter")),
    ),
}


@dataclass(frozen=True)
class Answer:
    """What the model behind `model` writes on the first request."""

    family: Family
    prefix: str
    calls: list[tuple[str, dict[str, Any]]]

    @property
    def markup(self) -> str:
        return self.family.render(self.calls)

    @property
    def text(self) -> str:
        return self.prefix + self.markup

    def call_id(self, position: int) -> str | None:
        name = self.calls[position][0]
        return self.family.call_id(name, position) if self.family.call_id else None


def answer_for(model: str) -> Answer:
    """The answer `model` (`FAMILY[/VARIANT...]`) writes; KeyError for an unknown family."""
    family, *variants = model.split("/")
    calls = [("get_weather", INVALID if "invalid" in variants else PARIS)]
    if "parallel" in variants:
        calls.append(("get_weather", TOKYO))
    return Answer(FAMILIES[family], PREFIX if "prefixed" in variants else "", calls)


def pieces(text: str) -> list[str]:
    """`text` cut into pieces of PIECE_SIZES in turn."""
    out: list[str] = []
    start = 0
    while start < len(text):
        size = PIECE_SIZES[len(out) % len(PIECE_SIZES)]
        out.append(text[start : start + size])
        start += size
    return out


# ── the follow-up's history ──────────────────────────────────────────────────


def _parsed_arguments(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return None
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return None


def history_problems(messages: list[Any], answer: Answer) -> list[str]:
    """Why a chat template could not render this follow-up (the last message is a `tool`
    message) as the conversation the model had; [] when it can."""
    tail = len(messages)
    while (
        tail > 0
        and isinstance(messages[tail - 1], dict)
        and messages[tail - 1].get("role") == "tool"
    ):
        tail -= 1
    tool_messages = messages[tail:]
    if tail == 0 or not isinstance(messages[tail - 1], dict):
        return ["no assistant message before the tool messages"]
    assistant = messages[tail - 1]
    if assistant.get("role") != "assistant":
        return [f"the message before the tool messages is {assistant.get('role')!r}"]
    problems: list[str] = []
    content = assistant.get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    problems += [
        f"assistant content still holds the markup {marker!r}"
        for marker in answer.family.markers
        if marker in text
    ]
    calls = assistant.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return [*problems, "assistant message has no tool_calls"]
    ids: list[str] = []
    for position, call in enumerate(calls):
        where = f"tool_calls[{position}]"
        if not isinstance(call, dict):
            problems.append(f"{where} is not an object")
            continue
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            problems.append(f"{where}.id is missing")
        else:
            ids.append(call_id)
        if call.get("type") != "function":
            problems.append(f"{where}.type is {call.get('type')!r}, not 'function'")
        function = call.get("function")
        if not isinstance(function, dict):
            problems.append(f"{where}.function is missing")
            continue
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not name:
            problems.append(f"{where}.function.name is missing")
        if not isinstance(arguments, str):
            problems.append(f"{where}.function.arguments is not a string: {arguments!r}")
        elif not isinstance(_parsed_arguments(arguments), dict):
            problems.append(f"{where}.function.arguments is not a JSON object: {arguments!r}")
        if position < len(answer.calls):
            wrote_name, wrote_arguments = answer.calls[position]
            if name != wrote_name or _parsed_arguments(arguments) != wrote_arguments:
                problems.append(
                    f"{where} is {name}({arguments}), the model wrote "
                    f"{wrote_name}({_json(wrote_arguments)})"
                )
            wrote_id = answer.call_id(position)
            if wrote_id is not None and call_id != wrote_id:
                problems.append(f"{where}.id is {call_id!r}, the model wrote {wrote_id!r}")
        rule = answer.family.id_rule
        if rule is not None and isinstance(call_id, str) and not rule.fullmatch(call_id):
            problems.append(f"{where}.id {call_id!r} is not of the form {rule.pattern}")
    if len(calls) != len(answer.calls):
        problems.append(f"{len(calls)} tool calls, the model wrote {len(answer.calls)}")
    if len(set(ids)) != len(ids):
        problems.append(f"call ids repeat: {ids}")
    answered = [m.get("tool_call_id") for m in tool_messages]
    if sorted(map(str, answered)) != sorted(ids):
        problems.append(f"tool messages answer {answered}, the calls are {ids}")
    return problems


def tool_results(messages: list[Any]) -> list[str]:
    """The contents of the trailing `tool` messages, in order."""
    out: list[str] = []
    for message in reversed(messages):
        if not (isinstance(message, dict) and message.get("role") == "tool"):
            break
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append(str(content))
    return out[::-1]


# ── the fake ─────────────────────────────────────────────────────────────────


def parsed_calls(answer: Answer, seed: str) -> list[dict[str, Any]]:
    """The calls as a working tool parser returns them (ids `call_<24 hex>` from `seed`, or
    the ones the model wrote)."""
    calls = []
    for position, (name, arguments) in enumerate(answer.calls):
        digest = hashlib.sha256(f"{seed}:{position}".encode()).hexdigest()
        calls.append(
            {
                "id": answer.call_id(position) or answer.family.made_id(digest),
                "type": "function",
                "function": {"name": name, "arguments": _json(arguments)},
            }
        )
    return calls


def declared(body: dict[str, Any]) -> set[str]:
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    return {
        t["function"].get("name")
        for t in tools
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    }


@dataclass
class MarkupUpstream:
    pause: float = 0.001
    """Seconds between two streamed events, so they cross the socket one by one."""
    parser: bool = False
    """The control: a tool parser that worked (see the module's docstring)."""
    requests: list[RecordedRequest] = field(default_factory=list)
    rejections: list[list[str]] = field(default_factory=list)
    app: Starlette = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._answers = 0
        self.app = Starlette(
            routes=[Route("/v1/chat/completions", self._chat_completions, methods=["POST"])]
        )

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if isinstance(r.body, dict)]

    def clear(self) -> None:
        self.requests.clear()
        self.rejections.clear()

    async def _chat_completions(self, request: Request) -> Response:
        recorded = await RecordedRequest.read(request)
        self.requests.append(recorded)
        body = recorded.body
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages: a non-empty list is required", "messages")
        model = str(body.get("model") or "")
        try:
            answer = answer_for(model)
        except KeyError:
            return _error(404, f"The model `{model}` does not exist.", "model", 404)
        stream = bool(body.get("stream"))
        last = messages[-1]
        if isinstance(last, dict) and last.get("role") == "tool":
            problems = history_problems(messages, answer)
            if problems:
                self.rejections.append(problems)
                return _error(400, "; ".join(problems), "messages")
            text = final_answer(tool_results(messages))
        else:
            text = answer.text
        self._answers += 1
        envelope = {
            "id": f"chatcmpl-markup{self._answers:08d}",
            "created": int(time.time()),
            "model": model,
        }
        calls: list[dict[str, Any]] = []
        if (
            self.parser
            and text == answer.text
            and body.get("tool_choice") != "none"
            and {name for name, _ in answer.calls} <= declared(body)
        ):
            text, calls = answer.prefix, parsed_calls(answer, envelope["id"])
        if stream:
            return StreamingResponse(
                self._stream(envelope, text, calls),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        completion = {
            **envelope,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": text or None,
                        "tool_calls": calls,
                    },
                    "logprobs": None,
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 40, "total_tokens": 160},
        }
        return Response(orjson.dumps(completion), media_type="application/json")

    async def _stream(
        self, envelope: dict[str, Any], text: str, calls: list[dict[str, Any]]
    ) -> AsyncIterator[bytes]:
        chunk = {**envelope, "object": "chat.completion.chunk"}

        def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return b"data: " + orjson.dumps({**chunk, "choices": [choice]}) + b"\n\n"

        yield event({"role": "assistant", "content": ""})
        for piece in pieces(text):
            await asyncio.sleep(self.pause)
            yield event({"content": piece})
        for index, call in enumerate(calls):
            function = call["function"]
            opening = {**call, "index": index, "function": {"name": function["name"]}}
            yield event({"tool_calls": [opening]})
            for fragment in pieces(function["arguments"]):
                await asyncio.sleep(self.pause)
                entry = {"index": index, "function": {"arguments": fragment}}
                yield event({"tool_calls": [entry]})
        await asyncio.sleep(self.pause)
        yield event({}, "tool_calls" if calls else "stop")
        yield b"data: [DONE]\n\n"


def _error(status: int, message: str, param: str, code: int | None = None) -> Response:
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error" if status == 400 else "NotFoundError",
            "param": param,
            "code": code,
        }
    }
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


@contextmanager
def running_markup_upstream(**knobs: Any) -> Iterator[tuple[MarkupUpstream, str]]:
    """Serve a MarkupUpstream on loopback; yield it and its base URL (`<root>/v1`)."""
    fake = MarkupUpstream(**knobs)
    with serve_in_thread(fake.app) as root:
        yield fake, f"{root}/v1"
