"""A fake Gemini OpenAI-compatible upstream that enforces the thought-signature rule.

It plays Google's `/v1beta/openai/chat/completions` closely enough for multi-step tool use
(PROTOCOL.md §1.1, §1.2):

- **Validation.** The current turn is every message after the newest `user` message with real
  text. In it, the first tool call of every assistant message with `tool_calls` (a "step") must
  carry `extra_content.google.thought_signature` equal to the signature this fake issued for
  that call id to the same credential, or the documented dummy
  `skip_thought_signature_validator`. A missing one gets HTTP 400 with Gemini's JSON-array
  body ("Function call is missing a thought_signature …"), a different one 400 "Corrupted
  thought signature.". Older turns are not checked for missing signatures, but a signature
  anywhere in the request (on any call, in any turn, or on a message) that this fake did not
  issue for exactly that call (or as a text signature), to that credential, is corrupted too,
  so a proxy that puts a signature on the wrong call or into another client's request is caught.
- **Answers** come from a script: step k of the current turn (k = how many assistant tool-call
  messages the turn already has) answers with `script[k]` (the last entry when k runs past the
  end). A `ToolStep` issues fresh ids and one fresh signature, on the first call only; a
  `TextStep` answers text and signs it on a last delta with `content: null`. A model named in
  `answers_by_model` (a client's small fast model, for its side requests) is answered apart
  from the script: text from its function of the request body, signed the same way.
- **Streaming exactly as Gemini does:** tool-call deltas without `index`, one call per chunk
  (or a parallel batch in one chunk, `parallel_in_one_chunk`),
  `role` repeated on every delta, `finish_reason: "stop"` even after calls, `usage` on chunks,
  non-final chunks without a `finish_reason` key. Non-streamed answers carry the signature on
  `message.tool_calls[i].extra_content.google.thought_signature` (or on the message for text)
  and finish with `"tool_calls"`.

Ids are Gemini-like opaque 8-character strings from a per-instance seeded generator, so one
fake hands out the same sequence every run; `fixed_ids(step, position)` overrides them (e.g. to
hand two clients the same ids). Signatures are random on every step.

Clients and the proxy use `<root>/v1beta/openai` as their base URL.
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
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.fake_upstream import RecordedRequest
from tests.support.servers import serve_in_thread

DUMMY_SIGNATURE = "skip_thought_signature_validator"
DOCS_URL = "https://ai.google.dev/gemini-api/docs/thought-signatures"


# ── the script ───────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolStep:
    """An answer with these calls (several = a parallel batch; only the first is signed)."""

    calls: tuple[Call, ...]


@dataclass(frozen=True)
class TextStep:
    """A final text answer, signed on a last metadata-only delta."""

    text: str


Step = ToolStep | TextStep


def tool_step(*calls: tuple[str, dict[str, Any]]) -> ToolStep:
    return ToolStep(tuple(Call(name, arguments) for name, arguments in calls))


# call -> parallel calls -> text: the three-step agent flow.
THREE_STEPS: list[Step] = [
    tool_step(("read_file", {"path": "a.txt"})),
    tool_step(("read_file", {"path": "b.txt"}), ("list_dir", {"path": "."})),
    TextStep("Both files are read; the directory has two entries."),
]
# call -> text: one tool round per turn, for two-turn flows.
TWO_STEPS: list[Step] = [
    tool_step(("read_file", {"path": "a.txt"})),
    TextStep("a.txt says hello."),
]

# JSON schemas for the script's tools, as clients declare them.
TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "read_file": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
    "list_dir": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}


# ── Gemini's errors ──────────────────────────────────────────────────────────


def gemini_error_body(message: str) -> bytes:
    """Gemini's error envelope: a JSON array with one error object."""
    error = {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    return orjson.dumps([error])


def missing_signature_message(name: str, position: int) -> str:
    return (
        "Function call is missing a thought_signature in functionCall parts. This is required "
        "for tools to work correctly, and missing thought_signature may lead to degraded model "
        f"performance. Additional data, function call `default_api:{name}` , position "
        f"{position}. Please refer to {DOCS_URL} for more details."
    )


CORRUPTED_SIGNATURE_MESSAGE = "Corrupted thought signature."


class Rejected(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ── reading a request ────────────────────────────────────────────────────────


def signature_of(holder: Any) -> str | None:
    """`holder.extra_content.google.thought_signature`, or None."""
    if not isinstance(holder, dict):
        return None
    extra = holder.get("extra_content")
    for namespace in ("google", "vertex"):  # Vertex's endpoint is reported to use its own
        issued = extra.get(namespace) if isinstance(extra, dict) else None
        value = issued.get("thought_signature") if isinstance(issued, dict) else None
        if isinstance(value, str):
            return value
    return None


def has_real_text(message: dict[str, Any]) -> bool:
    content = message.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            and part["text"].strip()
            for part in content
        )
    return False


def current_turn_start(messages: Sequence[Any]) -> int:
    """Index of the first message of the current turn (after the newest real user message)."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, dict) and message.get("role") == "user" and has_real_text(message):
            return i + 1
    return 0


def tool_calls_of(message: Any) -> list[dict[str, Any]]:
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return []
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def steps_in_current_turn(messages: Sequence[Any]) -> int:
    start = current_turn_start(messages)
    return sum(1 for message in messages[start:] if tool_calls_of(message))


# ── the fake ─────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Issued:
    tenant: str  # the Authorization header the answer went to ("" when none)
    call_id: str | None  # None for a text-turn signature
    signature: str
    step: int
    text: str | None = None  # the answer a text-turn signature came with


@dataclass
class GeminiUpstream:
    """The fake's state and knobs; tests may change knobs between requests.

    script: the answers, by step of the current turn (see module docstring).
    fixed_ids: (step, position in the step) -> call id; None draws opaque ids.
    parallel_in_one_chunk: stream a parallel batch as several entries of one chunk instead of
        one chunk per call (Gemini does both).
    seed: seeds the id generator.
    namespace: "google" (the compat endpoint) or "vertex" (a Vertex-shaped upstream).
    answers_by_model: model -> the text answer to a request naming it (from its body, e.g. JSON
        when it carries a `response_format`, as a constrained model writes), apart from the
        script.
    """

    script: list[Step] = field(default_factory=lambda: list(THREE_STEPS))
    fixed_ids: Callable[[int, int], str] | None = None
    parallel_in_one_chunk: bool = False
    seed: int = 0
    namespace: str = "google"
    """Under `extra_content.<namespace>` the signatures go out: "vertex" plays a Vertex-shaped
    upstream."""
    answers_by_model: dict[str, Callable[[dict[str, Any]], str]] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    issued: dict[str, str] = field(default_factory=dict)
    """call id -> the signature issued with it (the latest, if an id was issued twice)."""
    issued_log: list[Issued] = field(default_factory=list)
    text_signatures: dict[str, str] = field(default_factory=dict)
    """answer text -> the text-turn signature issued with it (the latest)."""
    rejections: int = 0
    responses: list[tuple[int, bytes]] = field(default_factory=list)
    """(status, body) of every answer; bodies of streamed answers are the whole SSE body."""
    app: Starlette = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._responses = 0
        self.app = Starlette(
            routes=[
                Route("/v1beta/openai/chat/completions", self._chat_completions, methods=["POST"]),
            ]
        )

    # what tests ask

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r.json for r in self.requests]

    def signature_for(self, call_id: str, tenant: str | None = None) -> str | None:
        """The signature issued with `call_id` (to `tenant`, an Authorization value, if given)."""
        for issued in reversed(self.issued_log):
            if issued.call_id == call_id and (tenant is None or issued.tenant == tenant):
                return issued.signature
        return None

    # the route

    async def _chat_completions(self, request: Request) -> Response:
        recorded = await RecordedRequest.read(request)
        self.requests.append(recorded)
        body, headers = recorded.body, recorded.headers
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self._reject("Invalid JSON payload received.")
        tenant = headers.get("authorization", "")
        messages = body["messages"]
        try:
            self._validate(tenant, messages)
        except Rejected as exc:
            return self._reject(exc.message)
        k = steps_in_current_turn(messages)
        step = self.script[min(k, len(self.script) - 1)]
        side = self.answers_by_model.get(str(body.get("model")))
        if side is not None:
            step = TextStep(side(body))
        model = str(body.get("model", "gemini-3-flash-preview"))
        if body.get("stream"):
            events = self._stream(tenant, k, step, model)
            sse = b"".join(events)
            self.responses.append((200, sse))
            return StreamingResponse(
                iter(events), media_type="text/event-stream", headers={"cache-control": "no-cache"}
            )
        content = orjson.dumps(self._message(tenant, k, step, model))
        self.responses.append((200, content))
        return Response(content, media_type="application/json")

    def _reject(self, message: str) -> Response:
        self.rejections += 1
        content = gemini_error_body(message)
        self.responses.append((400, content))
        return Response(content, status_code=400, media_type="application/json")

    # validation (PROTOCOL.md §1.2)

    def _validate(self, tenant: str, messages: list[Any]) -> None:
        start = current_turn_start(messages)
        # Positions count the conversation's contents (system instructions are not contents),
        # 1-based, like the `position N` in Gemini's message.
        position = 0
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise Rejected("Invalid JSON payload received.")
            if message.get("role") != "system":
                position += 1
            text_signature = signature_of(message)
            if text_signature not in (None, DUMMY_SIGNATURE) and not self._issued_text(
                tenant, str(text_signature)
            ):
                raise Rejected(CORRUPTED_SIGNATURE_MESSAGE)
            for n, call in enumerate(tool_calls_of(message)):
                call_id = call.get("id")
                signature = signature_of(call)
                if signature is None:
                    if n == 0 and i >= start:
                        name = (call.get("function") or {}).get("name", "")
                        raise Rejected(missing_signature_message(str(name), position))
                    continue
                if signature == DUMMY_SIGNATURE:
                    continue
                if not isinstance(call_id, str) or not self._issued_call(
                    tenant, call_id, signature
                ):
                    raise Rejected(CORRUPTED_SIGNATURE_MESSAGE)

    def _issued_call(self, tenant: str, call_id: str, signature: str) -> bool:
        return any(
            i.tenant == tenant and i.call_id == call_id and i.signature == signature
            for i in self.issued_log
        )

    def _issued_text(self, tenant: str, signature: str) -> bool:
        return any(
            i.tenant == tenant and i.call_id is None and i.signature == signature
            for i in self.issued_log
        )

    # answers

    def _new_id(self, step: int, position: int) -> str:
        if self.fixed_ids is not None:
            return self.fixed_ids(step, position)
        alphabet = string.ascii_lowercase + string.digits
        return "".join(self._rng.choice(alphabet) for _ in range(8))

    def _new_signature(self) -> str:
        # Real ones are base64 protobufs; the length is of the same order.
        return base64.b64encode(b"\x12\x34\x0a\x32" + secrets.token_bytes(44)).decode()

    def _issue_calls(self, tenant: str, k: int, step: ToolStep) -> list[dict[str, Any]]:
        signature = self._new_signature()
        calls = []
        for position, call in enumerate(step.calls):
            call_id = self._new_id(k, position)
            entry: dict[str, Any] = {
                "function": {"arguments": orjson.dumps(call.arguments).decode(), "name": call.name},
                "id": call_id,
                "type": "function",
            }
            if position == 0:
                entry = {
                    "extra_content": {self.namespace: {"thought_signature": signature}},
                    **entry,
                }
                self.issued[call_id] = signature
                self.issued_log.append(Issued(tenant, call_id, signature, k))
            calls.append(entry)
        return calls

    def _issue_text(self, tenant: str, k: int, step: TextStep) -> str:
        signature = self._new_signature()
        self.text_signatures[step.text] = signature
        self.issued_log.append(Issued(tenant, None, signature, k, step.text))
        return signature

    def _envelope(self, model: str, obj: str) -> dict[str, Any]:
        self._responses += 1
        return {
            "created": int(time.time()),
            "id": f"gemini-fake-{self.seed}-{self._responses}",
            "model": model,
            "object": obj,
        }

    def _stream(self, tenant: str, k: int, step: Step, model: str) -> list[bytes]:
        envelope = self._envelope(model, "chat.completion.chunk")
        usage = {"completion_tokens": 27, "prompt_tokens": 388, "total_tokens": 415}
        chunks: list[dict[str, Any]] = []
        if isinstance(step, ToolStep):
            calls = self._issue_calls(tenant, k, step)
            batches = [calls] if self.parallel_in_one_chunk else [[call] for call in calls]
            for batch in batches:
                delta = {"role": "assistant", "tool_calls": batch}
                chunks.append({"choices": [{"delta": delta, "index": 0}], **envelope})
            chunks[-1]["usage"] = usage
            last = {"delta": {"role": "assistant"}, "finish_reason": "stop", "index": 0}
            chunks.append({"choices": [last], **envelope, "usage": usage})
        else:
            signature = self._issue_text(tenant, k, step)
            half = len(step.text) // 2
            for piece in (step.text[:half], step.text[half:]):
                delta = {"role": "assistant", "content": piece}
                chunks.append({"choices": [{"delta": delta, "index": 0}], **envelope})
            delta = {
                "content": None,
                "extra_content": {self.namespace: {"thought_signature": signature}},
            }
            last = {"delta": delta, "finish_reason": "stop", "index": 0}
            chunks.append({"choices": [last], **envelope, "usage": usage})
        return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]

    def _message(self, tenant: str, k: int, step: Step, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant"}
        if isinstance(step, ToolStep):
            message["tool_calls"] = self._issue_calls(tenant, k, step)
            finish = "tool_calls"
        else:
            signature = self._issue_text(tenant, k, step)
            message["content"] = step.text
            message["extra_content"] = {self.namespace: {"thought_signature": signature}}
            finish = "stop"
        return {
            "choices": [{"finish_reason": finish, "index": 0, "message": message}],
            **self._envelope(model, "chat.completion"),
            "usage": {"completion_tokens": 27, "prompt_tokens": 388, "total_tokens": 415},
        }


@contextmanager
def running_gemini_upstream(
    script: Sequence[Step] | None = None, **knobs: Any
) -> Iterator[tuple[GeminiUpstream, str]]:
    """Serve a GeminiUpstream under uvicorn on loopback; yield it and its root URL.

    Clients and the proxy use `<root>/v1beta/openai` as their base URL.
    """
    fake = GeminiUpstream(script=list(script if script is not None else THREE_STEPS), **knobs)
    with serve_in_thread(fake.app) as root:
        yield fake, root
