"""A strict, Kimi-like OpenAI-compatible upstream: validates every history, numbers ids per round.

It plays Moonshot's Kimi (directly or behind a strict gateway) closely enough for the
conversation-integrity tests (PROTOCOL.md §1.3, §1.4, §1.6):

- **Validation** of every request, in message order; the first problem found is answered with
  HTTP 400 and OpenAI's error envelope `{"error": {"message", "type": "invalid_request_error",
  "param", "code": null}}`, with OpenAI's exact wording where OpenAI has one:
    - a `tool` message with no assistant `tool_calls` message before it (tool messages in
      between allowed): `messages with role 'tool' must be a response to a preceeding message
      with 'tool_calls'` (sic);
    - a `tool` message whose id is not a call of that assistant message:
      `'tool_call_id' of 'X' not found in 'tool_calls' of previous message.`;
    - an assistant message whose calls are not all answered before the next non-tool message
      (or the end): `An assistant message with 'tool_calls' must be followed by tool messages
      responding to each 'tool_call_id'. The following tool_call_ids did not have response
      messages: a, b`;
    - a tool-call id (or a `tool_call_id`) longer than 40 characters: OpenAI's `string too long`;
    - a tool-call id used by two calls anywhere in the request, or a call answered twice
      (Moonshot rejects duplicate ids; the wording is ours, see `duplicate_call_message`).
- **Kimi's own ids** (`own_ids_only`): an id in the history that is not `functions.NAME:N`
  (Kimi's template writes it into the prompt, the only place the model sees the call's name
  again; a client that rewrote it leaves the model reading ids it never wrote) is refused like
  OpenAI refuses an item id of the wrong shape (`Invalid 'input[0].id': … Expected an ID that
  begins with 'fc'.`), in the same envelope: the wording is ours, the shape OpenAI's.
- **Answers** come from a script keyed by round: round k = how many assistant messages with
  tool calls the current turn (everything after the newest `user` message) already has; the
  answer is `script[k]` (the last entry when k runs past the end). The default script is the
  Open WebUI / Kimi report (open-webui#28305): round one `functions.add_memory:0`,
  `functions.search_web:1` … `:4`; round two `functions.search_web:0` … `:4` (Kimi numbers
  ids per round); then a final text answer.
- **Streaming** is canonical and Kimi-shaped (like `transcripts/kimi_per_round_ids.sse`): a
  first delta with `role` and empty content, the round's text, then per call an opening delta
  with `index`, `id`, `type`, `function.name` and empty arguments followed by argument
  fragments carrying only `index`; the last chunk finishes with `"tool_calls"` (or `"stop"`)
  and carries Moonshot's usage inside the choice; then `[DONE]`. Non-streamed answers are one
  `chat.completion` with `message.tool_calls`.

Everything is deterministic (fixed `created`, numbered completion ids), so the same request
gets the same bytes back. Every request is recorded with its raw body (`RecordedRequest.raw`),
every answer as (status, body bytes) in `responses`.

Serve `POST <root>/v1/chat/completions`; clients and the proxy use `<root>/v1` as base URL.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
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

MODEL = "kimi-k2-0905-preview"
CREATED = 1756557762
MAX_ID_LENGTH = 40

# ── the script ───────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class ScriptedCall:
    id: str
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return orjson.dumps(self.arguments).decode()


@dataclass(frozen=True)
class ToolRound:
    """An answer with these parallel calls, after `text` (may be empty)."""

    calls: tuple[ScriptedCall, ...]
    text: str = ""


@dataclass(frozen=True)
class TextAnswer:
    text: str


Step = ToolRound | TextAnswer


def search(n: int, query: str) -> ScriptedCall:
    return ScriptedCall(f"functions.search_web:{n}", "search_web", {"query": query})


ROUND_ONE = ToolRound(
    text="I'll save that preference and run a few searches.",
    calls=(
        ScriptedCall(
            "functions.add_memory:0", "add_memory", {"content": "User follows EV batteries."}
        ),
        search(1, "solid-state battery 2026"),
        search(2, "sodium-ion battery cost"),
        search(3, "LFP vs NMC cycle life"),
        search(4, "battery recycling rates Europe"),
    ),
)
# Kimi numbers per round: round two starts again at :0 and reuses :1 … :4.
ROUND_TWO = ToolRound(
    text="Let me dig deeper into a few of those.",
    calls=(
        search(0, "solid-state battery production start"),
        search(1, "sodium-ion cars on sale"),
        search(2, "LFP cycle life study"),
        search(3, "NMC degradation 2026"),
        search(4, "EU battery regulation recycled content"),
    ),
)
FINAL_ANSWER = TextAnswer("Solid-state cells are still in pilot production; sodium-ion is cheap.")
KIMI_SCRIPT: list[Step] = [ROUND_ONE, ROUND_TWO, FINAL_ANSWER]

# The tools as a client declares them.
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "add_memory",
            "description": "Remember a fact about the user",
            "parameters": {
                "type": "object",
                "properties": {"content": {"type": "string"}},
                "required": ["content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
]


# ── validation (PROTOCOL.md §1.6) ────────────────────────────────────────────

TOOL_WITHOUT_CALLS_MESSAGE = (
    "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'"
)


def not_found_message(call_id: str) -> str:
    return f"'tool_call_id' of '{call_id}' not found in 'tool_calls' of previous message."


def unanswered_message(call_ids: Sequence[str]) -> str:
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(call_ids)
    )


def too_long_message(param: str, length: int) -> str:
    return (
        f"Invalid '{param}': string too long. Expected a string with maximum length "
        f"{MAX_ID_LENGTH}, but got a string with length {length} instead."
    )


def duplicate_call_message(call_id: str) -> str:
    return (
        f"Invalid request: duplicate tool_call id '{call_id}'. Every tool call in a request "
        "must have a unique id, and each tool call must be answered by exactly one tool message."
    )


KIMI_ID = re.compile(r"functions\.[A-Za-z0-9_.-]+:\d+")


def foreign_id_message(param: str, call_id: str) -> str:
    return (
        f"Invalid '{param}': '{call_id}'. Expected an ID of the form 'functions.<name>:<index>', "
        "as the tool call was issued."
    )


def check_own_ids(messages: Any) -> None:
    """Raise Rejected for the first call id (or result id) not in Kimi's own shape."""
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        if not isinstance(message, dict):
            continue
        for j, call in enumerate(tool_calls_of(message)):
            if not KIMI_ID.fullmatch(str(call.get("id"))):
                param = f"messages[{i}].tool_calls[{j}].id"
                raise Rejected(foreign_id_message(param, str(call.get("id"))), param)
        if message.get("role") == "tool" and not KIMI_ID.fullmatch(
            str(message.get("tool_call_id"))
        ):
            param = f"messages[{i}].tool_call_id"
            raise Rejected(foreign_id_message(param, str(message.get("tool_call_id"))), param)


class Rejected(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def tool_calls_of(message: Any) -> list[dict[str, Any]]:
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return []
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def validate(messages: Any) -> None:
    """Raise Rejected for the first problem in `messages`, walking them in order."""
    if not isinstance(messages, list) or not messages:
        raise Rejected("Invalid parameter: 'messages' must be a non-empty array.", "messages")
    seen_calls: dict[str, str] = {}  # id -> where it was first used
    block: list[str] | None = None  # the open assistant message's call ids, in order
    answered: set[str] = set()

    def close_block() -> None:
        nonlocal block
        if block is not None:
            missing = [i for i in block if i not in answered]
            if missing:
                raise Rejected(unanswered_message(missing), "messages")
        block = None

    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise Rejected(
                f"Invalid type for 'messages[{i}]': expected an object.", f"messages.[{i}]"
            )
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            param = f"messages.[{i}].tool_call_id"
            if isinstance(call_id, str) and len(call_id) > MAX_ID_LENGTH:
                raise Rejected(too_long_message(f"messages[{i}].tool_call_id", len(call_id)), param)
            if block is None:
                raise Rejected(TOOL_WITHOUT_CALLS_MESSAGE, f"messages.[{i}].role")
            if call_id not in block:
                raise Rejected(not_found_message(str(call_id)), param)
            if call_id in answered:
                raise Rejected(duplicate_call_message(call_id), param)
            answered.add(call_id)
            continue
        close_block()
        calls = tool_calls_of(message)
        if not calls:
            continue
        for j, call in enumerate(calls):
            call_id = call.get("id")
            param = f"messages.[{i}].tool_calls.[{j}].id"
            if not isinstance(call_id, str) or not call_id:
                raise Rejected(f"Missing required parameter: '{param}'.", param)
            if len(call_id) > MAX_ID_LENGTH:
                raise Rejected(
                    too_long_message(f"messages[{i}].tool_calls[{j}].id", len(call_id)), param
                )
            if call_id in seen_calls:
                raise Rejected(duplicate_call_message(call_id), param)
            seen_calls[call_id] = param
        block = [c["id"] for c in calls]
        answered = set()
    close_block()


def current_turn_start(messages: Sequence[Any]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], dict) and messages[i].get("role") == "user":
            return i + 1
    return 0


def round_of(messages: Sequence[Any]) -> int:
    """How many assistant tool-call messages the current turn already has."""
    return sum(1 for m in messages[current_turn_start(messages) :] if tool_calls_of(m))


def error_body(message: str, param: str | None) -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return orjson.dumps({"error": error})


# ── the fake ─────────────────────────────────────────────────────────────────


@dataclass
class StrictUpstream:
    """The fake's state; tests may change `script` between requests.

    fragments: how many pieces each call's arguments are streamed in.
    """

    script: list[Step] = field(default_factory=lambda: list(KIMI_SCRIPT))
    fragments: int = 3
    own_ids_only: bool = False
    requests: list[RecordedRequest] = field(default_factory=list)
    responses: list[tuple[int, bytes]] = field(default_factory=list)
    """(status, body) of every answer; a streamed answer's body is the whole SSE body."""
    app: Starlette = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._completions = 0
        self.app = Starlette(
            routes=[Route("/v1/chat/completions", self._chat_completions, methods=["POST"])]
        )

    @property
    def rejections(self) -> list[bytes]:
        return [body for status, body in self.responses if status != 200]

    async def _chat_completions(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = orjson.loads(raw) if raw else raw
        except orjson.JSONDecodeError:
            body = raw
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.url.path,
                query=request.url.query,
                headers=dict(request.headers.items()),
                body=body,
                raw=raw,
            )
        )
        if not isinstance(body, dict):
            return self._reject("We could not parse the JSON body of your request.", None)
        messages = body.get("messages")
        try:
            validate(messages)
            if self.own_ids_only:
                check_own_ids(messages)
        except Rejected as exc:
            return self._reject(exc.message, exc.param)
        k = round_of(messages)
        step = self.script[min(k, len(self.script) - 1)]
        self._completions += 1
        completion_id = f"chatcmpl-strict-{self._completions}"
        model = str(body.get("model") or MODEL)
        if body.get("stream"):
            events = self._events(step, completion_id, model)
            self.responses.append((200, b"".join(events)))
            return StreamingResponse(
                iter(events), media_type="text/event-stream", headers={"cache-control": "no-cache"}
            )
        content = orjson.dumps(self._completion(step, completion_id, model))
        self.responses.append((200, content))
        return Response(content, media_type="application/json")

    def _reject(self, message: str, param: str | None) -> Response:
        content = error_body(message, param)
        self.responses.append((400, content))
        return Response(content, status_code=400, media_type="application/json")

    # answers

    def _events(self, step: Step, completion_id: str, model: str) -> list[bytes]:
        envelope = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
            return b"data: " + orjson.dumps({**envelope, "choices": [choice]}) + b"\n\n"

        events = [chunk({"role": "assistant", "content": ""})]
        text = step.text
        if text:
            half = len(text) // 2
            events += [chunk({"content": text[:half]}), chunk({"content": text[half:]})]
        if isinstance(step, ToolRound):
            for index, call in enumerate(step.calls):
                opening = {
                    "index": index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
                events.append(chunk({"tool_calls": [opening]}))
                for piece in _split(call.arguments_json, self.fragments):
                    fragment = {"index": index, "function": {"arguments": piece}}
                    events.append(chunk({"tool_calls": [fragment]}))
        finish = "tool_calls" if isinstance(step, ToolRound) else "stop"
        events.append(chunk({}, finish, usage=_USAGE))
        return [*events, b"data: [DONE]\n\n"]

    def _completion(self, step: Step, completion_id: str, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": step.text}
        finish = "stop"
        if isinstance(step, ToolRound):
            message["tool_calls"] = [
                {
                    "index": index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json},
                }
                for index, call in enumerate(step.calls)
            ]
            finish = "tool_calls"
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": CREATED,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": _USAGE,
        }


_USAGE = {"prompt_tokens": 233, "completion_tokens": 41, "total_tokens": 274, "cached_tokens": 0}


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)]


@contextmanager
def running_strict_upstream(
    script: Sequence[Step] | None = None, **knobs: Any
) -> Iterator[tuple[StrictUpstream, str]]:
    """Serve a StrictUpstream under uvicorn on loopback; yield it and its root URL (no path;
    the OpenAI base URL is `<root>/v1`)."""
    fake = StrictUpstream(script=list(script if script is not None else KIMI_SCRIPT), **knobs)
    with serve_in_thread(fake.app) as root:
        yield fake, root
