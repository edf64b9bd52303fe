"""Fake DeepSeek and OpenRouter upstreams that enforce their reasoning-receipt rules.

Both answer OpenAI-compatible chat completions from a script, streamed and non-streamed, and
keep what they handed out so that a test (and the fake itself) can check it comes back
(PROTOCOL.md §1.5, §1.7):

- **DeepSeek** (`/v1/chat/completions`, thinking mode). Every answer carries reasoning:
  streamed as `delta.reasoning_content` pieces (the first chunk says `"reasoning_content": ""`)
  before content and tool calls, non-streamed as `message.reasoning_content`. Tool calls are
  canonical (index, `call_00_<random>` ids, arguments in fragments), finish `"tool_calls"`.
  **Rule**: every assistant message with tool calls after the first user message must carry
  exactly the `reasoning_content` this fake issued, to the same credential, with those call ids;
  otherwise HTTP 400 `The reasoning_content in the thinking mode must be passed back to the
  API.` (`invalid_request_error`). A tool-calling message with reasoning the fake never issued
  for it is rejected the same way. Text-only messages: `reasoning_content` is ignored.
  **Rule** (`deepseek_response_format`): `response_format` `{"type": "json_schema", …}` gets
  HTTP 400 `This response_format type is unavailable now` (llm-exe#662, inspect_ai#4916);
  `{"type": "json_object"}` is taken only when a system or user message says "json" (any case:
  DeepSeek's own JSON-mode example says "JSON"), else HTTP 400 `Prompt must contain the word
  'json' in some form to use 'response_format' of type 'json_object'.` (vercel/ai#7913). Both
  in DeepSeek's OpenAI-shaped error body, checked before anything else.
- **OpenRouter** (`/api/v1/chat/completions`, e.g. `google/gemini-3-pro-preview`). Every answer
  carries `reasoning_details`: a `reasoning.text` entry (`index` 0, `format`
  "google-gemini-v1", an `id`) streamed as 2-3 pieces sharing the index (text concatenates; only
  the first piece has the id), then a `reasoning.encrypted` entry (`data`, `index` 1), streamed
  on the delta of the first tool call (or of the last text piece). `delta.reasoning` /
  `message.reasoning` carry the plain reasoning text too, as OpenRouter does; the stream opens
  with an `: OPENROUTER PROCESSING` comment and repeats `role` on every delta. Non-streamed:
  `message.reasoning_details`, the merged array. **Rule**: every assistant message this fake
  answered (tool calls: by their ids; text: by its text) must carry back the exact array it
  issued to that credential (same entries, same order, same fields), else 400 "Gemini models
  require OpenRouter reasoning details to be preserved in each request. …"; an array the fake
  did not issue for that message (altered, reordered, another credential's) gets OpenRouter's
  "Provider returned error" 400 wrapping Gemini's "Corrupted thought signature.".

**Script.** `script[t]` is turn t's list of steps (t = user messages with text so far, minus 1;
the last list repeats); step k of the current turn (k = assistant tool-call messages after the
newest user message) answers with `script[t][k]` (the last step repeats). The default script:
turn 0 is call -> parallel calls -> text, turn 1 is call -> text (`TWO_TURNS`).

Ids come from a per-instance seeded generator; `fixed_ids(turn, step, position)` overrides them
(to give two clients the same ids). Reasoning is random on every answer; `reasoning_chars`
sets its length (it contains newlines, quotes and non-ASCII, to catch any re-encoding).
"""

from __future__ import annotations

import base64
import random
import secrets
import string
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.fake_upstream import RecordedRequest
from tests.support.gemini_upstream import (
    TOOL_SCHEMAS,
    Call,
    Step,
    TextStep,
    ToolStep,
    current_turn_start,
    has_real_text,
    tool_calls_of,
    tool_step,
)
from tests.support.servers import serve_in_thread

__all__ = [
    "DEEPSEEK_FORMAT_UNAVAILABLE",
    "DEEPSEEK_JSON_WORD",
    "DEEPSEEK_MESSAGE",
    "OPENROUTER_MISSING_MESSAGE",
    "TOOL_SCHEMAS",
    "TWO_TURNS",
    "Call",
    "DeepSeekUpstream",
    "Issued",
    "OpenRouterUpstream",
    "Rejection",
    "Step",
    "TextStep",
    "ToolStep",
    "deepseek_response_format",
    "running_deepseek_upstream",
    "running_openrouter_upstream",
    "step_of",
    "tool_calls_of",
    "tool_step",
]

# Turn 0: call -> parallel calls -> text; turn 1 (a new user question): call -> text.
TWO_TURNS: list[list[Step]] = [
    [
        tool_step(("read_file", {"path": "a.txt"})),
        tool_step(("read_file", {"path": "b.txt"}), ("list_dir", {"path": "."})),
        TextStep("Both files are read; the directory has two entries."),
    ],
    [
        tool_step(("read_file", {"path": "c.txt"})),
        TextStep("c.txt says goodbye."),
    ],
]

DEEPSEEK_MESSAGE = "The reasoning_content in the thinking mode must be passed back to the API."
DEEPSEEK_FORMAT_UNAVAILABLE = "This response_format type is unavailable now"
DEEPSEEK_JSON_WORD = (
    "Prompt must contain the word 'json' in some form to use 'response_format' of type "
    "'json_object'."
)
OPENROUTER_MISSING_MESSAGE = (
    "Gemini models require OpenRouter reasoning details to be preserved in each request. "
    "Please refer to our docs: "
    "https://openrouter.ai/docs/use-cases/reasoning-tokens#preserving-reasoning-blocks."
)
CORRUPTED_SIGNATURE_RAW = (
    '{"error":{"code":400,"message":"Corrupted thought signature.","status":"INVALID_ARGUMENT"}}'
)

# Reasoning texts are drawn from these: spaces, newlines, quotes, backslashes and non-ASCII.
REASONING_ALPHABET = string.ascii_letters + string.digits + "     \n\"'\\{}é∑→"


@dataclass(frozen=True)
class Issued:
    """One answer and the receipt it came with."""

    tenant: str  # the Authorization header it went to ("" when none)
    turn: int
    step: int
    call_ids: tuple[str, ...]  # () for a text answer
    text: str | None  # the answer's text, for a text answer
    receipt: Any  # DeepSeek: the reasoning_content string; OpenRouter: the reasoning_details
    reasoning: str  # the plain reasoning text
    stream: bool
    pieces: tuple[Any, ...] = ()
    """Streamed answers: every reasoning value sent, in order (DeepSeek: the
    `delta.reasoning_content` strings; OpenRouter: each `delta.reasoning_details` list)."""


@dataclass(frozen=True)
class Rejection:
    reason: str  # "missing", "altered" (not what was issued for it), "unknown" (never issued)
    message_index: int


class Rejected(Exception):
    def __init__(self, reason: str, message_index: int) -> None:
        super().__init__(reason, message_index)
        self.rejection = Rejection(reason, message_index)


def turn_of(messages: Sequence[Any]) -> int:
    """0 for the first user question, 1 after the second, …"""
    users = sum(
        1 for m in messages if isinstance(m, dict) and m.get("role") == "user" and has_real_text(m)
    )
    return max(users - 1, 0)


def step_of(messages: Sequence[Any]) -> int:
    start = current_turn_start(messages)
    return sum(1 for message in messages[start:] if tool_calls_of(message))


def call_ids_of(message: Any) -> tuple[str, ...]:
    return tuple(str(c.get("id")) for c in tool_calls_of(message))


def text_of(message: dict[str, Any]) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    return None


@dataclass
class _ReasoningUpstream:
    """What both fakes share: script, ids, reasoning, request log and what was issued.

    script: per turn, the answers by step (see module docstring).
    fixed_ids: (turn, step, position) -> call id; None draws ids from the seeded generator.
    reasoning_chars: length of each answer's reasoning text.
    piece_chars: streamed reasoning arrives in pieces of at most this many characters (at
        least `min_pieces` pieces).
    reasoning_alphabet: what reasoning is drawn from (e.g. CJK, as DeepSeek often reasons).
    """

    script: list[list[Step]] = field(default_factory=lambda: [list(t) for t in TWO_TURNS])
    fixed_ids: Callable[[int, int, int], str] | None = None
    reasoning_chars: int = 240
    piece_chars: int = 8192
    min_pieces: int = 3
    reasoning_alphabet: str = REASONING_ALPHABET
    seed: int = 0
    shared_index: bool = False
    """OpenRouter only: the encrypted detail shares index 0 with the text (OpenRouter relaying
    Grok, Vercel's AI Gateway relaying Gemini 3): two details, one index."""
    requests: list[RecordedRequest] = field(default_factory=list)
    issued_log: list[Issued] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    responses: list[tuple[int, bytes]] = field(default_factory=list)
    """(status, body) of every answer; a streamed answer's body is the whole SSE body."""
    app: Starlette = field(init=False, repr=False)

    PATH: ClassVar[str] = "/v1/chat/completions"
    DEFAULT_MODEL: ClassVar[str] = ""

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._answers = 0
        self.app = Starlette(routes=[Route(self.PATH, self._chat_completions, methods=["POST"])])

    # what tests ask

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r.json for r in self.requests]

    def issued_for(self, message: dict[str, Any], tenant: str) -> list[Issued]:
        """The answers this fake gave, to `tenant`, that `message` (an assistant message sent
        back) repeats: by its call ids, or for a text answer by its text."""
        ids = call_ids_of(message)
        if ids:
            return [i for i in self.issued_log if i.tenant == tenant and i.call_ids == ids]
        text = text_of(message)
        return [
            i
            for i in self.issued_log
            if i.tenant == tenant and not i.call_ids and i.text is not None and i.text == text
        ]

    def receipt_for(self, call_ids: Sequence[str], tenant: str | None = None) -> Any:
        """The receipt issued (latest) with the answer that had these call ids."""
        for issued in reversed(self.issued_log):
            if issued.call_ids == tuple(call_ids) and tenant in (None, issued.tenant):
                return issued.receipt
        return None

    # the route

    async def _chat_completions(self, request: Request) -> Response:
        recorded = await RecordedRequest.read(request)
        self.requests.append(recorded)
        body, headers = recorded.body, recorded.headers
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self._error(400, self._bad_request_body())
        tenant = headers.get("authorization", "")
        messages = body["messages"]
        if not all(isinstance(m, dict) for m in messages):
            return self._error(400, self._bad_request_body())
        refused = self._refused(body)
        if refused is not None:
            return self._error(400, refused)
        try:
            self._validate(tenant, messages)
        except Rejected as exc:
            self.rejections.append(exc.rejection)
            return self._error(400, self._rejection_body(exc.rejection))
        turn, k = turn_of(messages), step_of(messages)
        steps = self.script[min(turn, len(self.script) - 1)]
        step = steps[min(k, len(steps) - 1)]
        model = str(body.get("model") or self.DEFAULT_MODEL)
        stream = bool(body.get("stream"))
        calls = self._new_calls(turn, k, step) if isinstance(step, ToolStep) else []
        reasoning = self._new_reasoning(turn, k)
        if stream:
            events = self._stream(tenant, turn, k, step, calls, reasoning, model)
            self.responses.append((200, b"".join(events)))
            return StreamingResponse(
                iter(events), media_type="text/event-stream", headers={"cache-control": "no-cache"}
            )
        content = orjson.dumps(self._completion(tenant, turn, k, step, calls, reasoning, model))
        self.responses.append((200, content))
        return Response(content, media_type="application/json")

    def _error(self, status: int, body: dict[str, Any]) -> Response:
        content = orjson.dumps(body)
        self.responses.append((status, content))
        return Response(content, status_code=status, media_type="application/json")

    # answers

    def _new_id(self, turn: int, step: int, position: int, name: str) -> str:
        if self.fixed_ids is not None:
            return self.fixed_ids(turn, step, position)
        return self._draw_id(position, name)

    def _draw_id(self, position: int, name: str) -> str:
        raise NotImplementedError

    def _new_calls(self, turn: int, k: int, step: ToolStep) -> list[dict[str, Any]]:
        return [
            {
                "id": self._new_id(turn, k, position, call.name),
                "type": "function",
                "function": {"name": call.name, "arguments": orjson.dumps(call.arguments).decode()},
            }
            for position, call in enumerate(step.calls)
        ]

    def _new_reasoning(self, turn: int, k: int) -> str:
        head = f"Turn {turn}, step {k}: let me think.\n"
        size = max(self.reasoning_chars - len(head), 0)
        return head + "".join(self._rng.choices(self.reasoning_alphabet, k=size))

    def _split(self, text: str) -> list[str]:
        """Reasoning pieces as streamed: at least `min_pieces`, at most `piece_chars` each."""
        count = max(self.min_pieces, -(-len(text) // self.piece_chars))
        size = max(-(-len(text) // count), 1)
        return [text[i : i + size] for i in range(0, len(text), size)] or [text]

    def _envelope(self, model: str, obj: str) -> dict[str, Any]:
        self._answers += 1
        return {
            "id": f"{self._id_prefix()}{self.seed}-{self._answers}",
            "object": obj,
            "created": int(time.time()),
            "model": model,
        }

    @staticmethod
    def _sse(chunks: list[dict[str, Any]]) -> list[bytes]:
        return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]

    # per provider

    def _id_prefix(self) -> str:
        raise NotImplementedError

    def _refused(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The error body of a request refused whole, before its messages are read."""
        return None

    def _validate(self, tenant: str, messages: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def _bad_request_body(self) -> dict[str, Any]:
        raise NotImplementedError

    def _rejection_body(self, rejection: Rejection) -> dict[str, Any]:
        raise NotImplementedError

    def _stream(
        self,
        tenant: str,
        turn: int,
        k: int,
        step: Step,
        calls: list[dict[str, Any]],
        reasoning: str,
        model: str,
    ) -> list[bytes]:
        raise NotImplementedError

    def _completion(
        self,
        tenant: str,
        turn: int,
        k: int,
        step: Step,
        calls: list[dict[str, Any]],
        reasoning: str,
        model: str,
    ) -> dict[str, Any]:
        raise NotImplementedError


# ── DeepSeek ─────────────────────────────────────────────────────────────────


@dataclass
class DeepSeekUpstream(_ReasoningUpstream):
    """DeepSeek's API in thinking mode (see module docstring). Base URL: `<root>/v1`."""

    PATH: ClassVar[str] = "/v1/chat/completions"
    DEFAULT_MODEL: ClassVar[str] = "deepseek-v4-flash"

    def _id_prefix(self) -> str:
        return "ds-fake-"

    def _draw_id(self, position: int, name: str) -> str:
        alphabet = string.ascii_letters + string.digits
        return f"call_{position:02d}_" + "".join(self._rng.choice(alphabet) for _ in range(24))

    def _bad_request_body(self) -> dict[str, Any]:
        return _openai_error("Failed to deserialize the JSON body into the target type")

    def _rejection_body(self, rejection: Rejection) -> dict[str, Any]:
        return _openai_error(DEEPSEEK_MESSAGE)

    def _refused(self, body: dict[str, Any]) -> dict[str, Any] | None:
        return deepseek_response_format(body)

    def _validate(self, tenant: str, messages: list[dict[str, Any]]) -> None:
        """Between two user messages, a tool-calling turn's reasoning must come back in every
        later request (DeepSeek's thinking-mode guide); text turns' reasoning is ignored."""
        first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
        if first_user is None:
            return
        for i, message in enumerate(messages[first_user:], start=first_user):
            if not tool_calls_of(message):
                continue
            sent = message.get("reasoning_content")
            if sent is None:
                raise Rejected("missing", i)
            issued = self.issued_for(message, tenant)
            if not issued:
                raise Rejected("unknown", i)
            if all(sent != item.receipt for item in issued):
                raise Rejected("altered", i)

    def _stream(
        self,
        tenant: str,
        turn: int,
        k: int,
        step: Step,
        calls: list[dict[str, Any]],
        reasoning: str,
        model: str,
    ) -> list[bytes]:
        envelope = {**self._envelope(model, "chat.completion.chunk"), "system_fingerprint": "fp_1"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**envelope, "choices": [choice]}

        pieces = ["", *self._split(reasoning)]
        chunks = [chunk({"role": "assistant", "content": None, "reasoning_content": ""})]
        chunks += [chunk({"content": None, "reasoning_content": p}) for p in pieces[1:]]
        if isinstance(step, ToolStep):
            for index, call in enumerate(calls):
                opening = {**call, "index": index, "function": {**call["function"]}}
                arguments = opening["function"]["arguments"]
                opening["function"]["arguments"] = ""
                chunks.append(chunk({"tool_calls": [opening]}))
                half = len(arguments) // 2
                for fragment in (arguments[:half], arguments[half:]):
                    fragment_entry = {"index": index, "function": {"arguments": fragment}}
                    chunks.append(chunk({"tool_calls": [fragment_entry]}))
            finish = "tool_calls"
            text = None
        else:
            half = len(step.text) // 2
            for piece in (step.text[:half], step.text[half:]):
                chunks.append(chunk({"content": piece, "reasoning_content": None}))
            finish = "stop"
            text = step.text
        chunks.append(chunk({"content": "", "reasoning_content": None}, finish))
        chunks[-1]["usage"] = _usage(len(reasoning))
        self.issued_log.append(
            Issued(
                tenant,
                turn,
                k,
                tuple(c["id"] for c in calls),
                text,
                reasoning,
                reasoning,
                stream=True,
                pieces=tuple(pieces),
            )
        )
        return self._sse(chunks)

    def _completion(
        self,
        tenant: str,
        turn: int,
        k: int,
        step: Step,
        calls: list[dict[str, Any]],
        reasoning: str,
        model: str,
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "reasoning_content": reasoning}
        if isinstance(step, ToolStep):
            message = {**message, "content": "", "tool_calls": calls}
            finish, text = "tool_calls", None
        else:
            message = {**message, "content": step.text}
            finish, text = "stop", step.text
        ids = tuple(c["id"] for c in calls)
        self.issued_log.append(
            Issued(tenant, turn, k, ids, text, reasoning, reasoning, stream=False)
        )
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        return {
            **self._envelope(model, "chat.completion"),
            "choices": [choice],
            "usage": _usage(len(reasoning)),
            "system_fingerprint": "fp_1",
        }


def deepseek_response_format(body: dict[str, Any]) -> dict[str, Any] | None:
    """DeepSeek's error body for a `response_format` its chat API refuses (module docstring),
    or None: JSON mode only, and only with "json" in the prompt."""
    response_format = body.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_schema":
        return _openai_error(DEEPSEEK_FORMAT_UNAVAILABLE)
    if kind != "json_object":
        return None
    prompt = " ".join(
        text_of(message) or ""
        for message in body.get("messages") or ()
        if isinstance(message, dict) and message.get("role") in ("system", "user")
    )
    return None if "json" in prompt.lower() else _openai_error(DEEPSEEK_JSON_WORD)


def _openai_error(message: str) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    }


def _usage(reasoning_chars: int) -> dict[str, Any]:
    reasoning_tokens = max(reasoning_chars // 4, 1)
    return {
        "prompt_tokens": 412,
        "completion_tokens": reasoning_tokens + 31,
        "total_tokens": 412 + reasoning_tokens + 31,
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }


# ── OpenRouter ───────────────────────────────────────────────────────────────

GEMINI_FORMAT = "google-gemini-v1"


@dataclass
class OpenRouterUpstream(_ReasoningUpstream):
    """OpenRouter serving a Gemini model (see module docstring). Base URL: `<root>/api/v1`."""

    PATH: ClassVar[str] = "/api/v1/chat/completions"
    DEFAULT_MODEL: ClassVar[str] = "google/gemini-3-pro-preview"

    def _id_prefix(self) -> str:
        return "gen-fake-"

    def _draw_id(self, position: int, name: str) -> str:
        alphabet = string.ascii_letters + string.digits
        return f"tool_{name}_" + "".join(self._rng.choice(alphabet) for _ in range(20))

    def _bad_request_body(self) -> dict[str, Any]:
        return {"error": {"message": "Invalid JSON body", "code": 400}}

    def _rejection_body(self, rejection: Rejection) -> dict[str, Any]:
        if rejection.reason == "missing":
            return {"error": {"message": OPENROUTER_MISSING_MESSAGE, "code": 400}}
        return {
            "error": {
                "message": "Provider returned error",
                "code": 400,
                "metadata": {"raw": CORRUPTED_SIGNATURE_RAW, "provider_name": "Google AI Studio"},
            }
        }

    def _validate(self, tenant: str, messages: list[dict[str, Any]]) -> None:
        """Every assistant message this fake answered with reasoning_details carries them back
        unchanged; none carries details the fake did not issue for it."""
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            sent = message.get("reasoning_details")
            issued = self.issued_for(message, tenant)
            if sent is None:
                if issued:
                    raise Rejected("missing", i)
                continue
            if not issued:
                raise Rejected("unknown", i)
            if all(sent != item.receipt for item in issued):
                raise Rejected("altered", i)

    def _details(self, reasoning: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The merged reasoning_details of one answer."""
        signature = base64.b64encode(b"\x12\x34\x0a\x32" + secrets.token_bytes(60)).decode()
        return [
            {
                "type": "reasoning.text",
                "text": reasoning,
                "format": GEMINI_FORMAT,
                "id": "rs_" + secrets.token_hex(8),
                "index": 0,
            },
            {
                "type": "reasoning.encrypted",
                "data": signature,
                "format": GEMINI_FORMAT,
                "id": calls[0]["id"] if calls else "rs_" + secrets.token_hex(8),
                "index": 0 if self.shared_index else 1,
            },
        ]

    def _stream(
        self,
        tenant: str,
        turn: int,
        k: int,
        step: Step,
        calls: list[dict[str, Any]],
        reasoning: str,
        model: str,
    ) -> list[bytes]:
        envelope = {**self._envelope(model, "chat.completion.chunk"), "provider": "Google"}
        details = self._details(reasoning, calls)
        text_entry, encrypted = details

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {
                "index": 0,
                "delta": {"role": "assistant", "content": "", **delta},
                "finish_reason": finish,
                "native_finish_reason": "STOP" if finish else None,
                "logprobs": None,
            }
            return {**envelope, "choices": [choice]}

        pieces: list[list[dict[str, Any]]] = []
        chunks = []
        for n, text in enumerate(self._split(reasoning)):
            # Every piece repeats type, format and index; only the first has the id.
            piece = {"type": "reasoning.text", "text": text, "format": GEMINI_FORMAT, "index": 0}
            if n == 0:
                piece = {**piece, "id": text_entry["id"]}
            pieces.append([piece])
            chunks.append(chunk({"reasoning": text, "reasoning_details": [piece]}))
        if isinstance(step, ToolStep):
            for index, call in enumerate(calls):
                delta: dict[str, Any] = {"tool_calls": [{"index": index, **call}]}
                if index == 0:
                    delta = {"reasoning_details": [encrypted], **delta}
                    pieces.append([encrypted])
                chunks.append(chunk(delta))
            finish, text_answer = "tool_calls", None
        else:
            half = len(step.text) // 2
            chunks.append(chunk({"content": step.text[:half]}))
            chunks.append(chunk({"content": step.text[half:], "reasoning_details": [encrypted]}))
            pieces.append([encrypted])
            finish, text_answer = "stop", step.text
        chunks.append(chunk({}, finish))
        chunks[-1]["usage"] = _usage(len(reasoning))
        self.issued_log.append(
            Issued(
                tenant,
                turn,
                k,
                tuple(c["id"] for c in calls),
                text_answer,
                details,
                reasoning,
                stream=True,
                pieces=tuple(pieces),
            )
        )
        return [b": OPENROUTER PROCESSING\n\n", *self._sse(chunks)]

    def _completion(
        self,
        tenant: str,
        turn: int,
        k: int,
        step: Step,
        calls: list[dict[str, Any]],
        reasoning: str,
        model: str,
    ) -> dict[str, Any]:
        details = self._details(reasoning, calls)
        message: dict[str, Any] = {"role": "assistant", "refusal": None, "reasoning": reasoning}
        if isinstance(step, ToolStep):
            message = {
                **message,
                "content": "",
                "reasoning_details": details,
                "tool_calls": [{"index": i, **c} for i, c in enumerate(calls)],
            }
            finish, text = "tool_calls", None
        else:
            message = {**message, "content": step.text, "reasoning_details": details}
            finish, text = "stop", step.text
        ids = tuple(c["id"] for c in calls)
        self.issued_log.append(Issued(tenant, turn, k, ids, text, details, reasoning, False))
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish,
            "native_finish_reason": "STOP",
        }
        return {
            **self._envelope(model, "chat.completion"),
            "provider": "Google",
            "choices": [choice],
            "usage": _usage(len(reasoning)),
        }


# ── serving ──────────────────────────────────────────────────────────────────


@contextmanager
def running_deepseek_upstream(**knobs: Any) -> Iterator[tuple[DeepSeekUpstream, str]]:
    """Serve a DeepSeekUpstream on loopback; yield it and its root (base URL: `<root>/v1`)."""
    fake = DeepSeekUpstream(**knobs)
    with serve_in_thread(fake.app) as root:
        yield fake, root


@contextmanager
def running_openrouter_upstream(**knobs: Any) -> Iterator[tuple[OpenRouterUpstream, str]]:
    """Serve an OpenRouterUpstream on loopback; yield it and its root (base URL:
    `<root>/api/v1`)."""
    fake = OpenRouterUpstream(**knobs)
    with serve_in_thread(fake.app) as root:
        yield fake, root
