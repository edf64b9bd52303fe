"""Fake upstreams for `streamfix doctor`, one Starlette app whose quirks are switches, each a
real upstream's behaviour with its real error body:

- Gemini-like: tool calls without `index`, finish "stop" after calls (README's table, from the
  transcripts), a 400 `Unknown name "additionalProperties"` for a schema carrying it
  (Routstr/routstr-core#505, `tests/support/rejecting_upstream.gemini_unknown_name`).
- Kimi-like: call ids numbered per round, `functions.NAME:0` again in round two.
- vLLM-like: calls without id and name, or the call written as `<tool_call>` markup.
- DeepSeek-like: reasoning_content on every answer, and a 400 "The reasoning_content in the
  thinking mode must be passed back to the API." for a tool-calling turn sent back without it;
  its 400 for a dotted tool name quotes OpenAI's pattern (the deepseek profile's note).
- vLLM-Qwen-like: a Qwen 3.5+ chat template refusing any system message not first, which vLLM
  answers 400 "System message must be at the beginning." (vllm#41114).
- vLLM-Gemma-like: Gemma 2's template refusing every system message, vLLM's 400
  `{"object":"error","message":"System role not supported",…}` (vllm-project/vllm#2964).
- Rejecting `stream_options`: a 400 "Unrecognized request argument supplied: stream_options",
  OpenAI's and Azure's phrase for a parameter they do not take (BerriAI/litellm#10791; the same
  parameter refused in QuantumNous/new-api#418); or taking it and sending no usage.
- Cut with `stop`: an answer cut at `max_tokens` ended with "stop" (llm-d/llm-d-inference-sim
  #29, huggingface/transformers#42157), or with no finish at all.
- A native `POST /v1/responses` (`native_responses`), refusing the doctor's probe (`input` a
  number) as OpenAI does, a 400 `invalid_type` with `param: "input"` ("openai"; the wording of
  OpenAI's `Invalid type for 'input': expected …, but got … instead.`), or as a vLLM-based
  server does, its pydantic errors in the message ("vllm"; MiaAI-Lab/DeepSeek-v4-Flash-DSpark
  -2x-DGX-Spark#138). Without one, the path gets Starlette's own 404 `Not Found`, as an app
  without the route answers.
- OpenAI-like: none of these; usage sent when asked for, a cut reported as `length`. With
  `fragments`, each call streams exactly as OpenAI streams it: an opening delta with index, id,
  type, name and empty arguments, then the arguments in several fragments carrying only the
  index.

Every request is kept (`requests`, and `responses_requests` for `/v1/responses`), so a test
can show nothing was sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tests.support.reasoning_upstreams import DEEPSEEK_MESSAGE
from tests.support.rejecting_upstream import gemini_unknown_name
from tests.support.servers import serve_in_thread

REASONING = "The user wants the weather."


@dataclass
class Quirks:
    index: bool = True
    stop_after_calls: bool = False
    rejects_additional_properties: bool = False
    ids: str = "unique"
    """"unique", "kimi" (functions.NAME:N per round) or "none" (no id, no name)."""
    markup: bool = False
    reasoning_required: bool = False
    rejects_dotted_names: bool = False
    gzip: bool = False
    """Compress answers for clients that accept gzip (httpx's default)."""
    echoes_key: bool = False
    """Refuse a developer message with a 401 quoting the key it was sent."""
    late_system_refused: bool = False
    rejects_system: bool = False
    rejects_stream_options: bool = False
    usage: bool = True
    """Send the usage chunk when `stream_options.include_usage` asks for it."""
    cut_finish: str = "length"
    """How an answer cut at `max_tokens` 1 ends: "length", "stop" or "none" (no finish)."""
    fragments: bool = False
    """Stream each call's arguments in fragments after its opening delta, as OpenAI does."""
    native_responses: str = ""
    """A native /v1/responses: "" none, "openai" or "vllm" (how it refuses a bad `input`)."""


GEMINI = Quirks(index=False, stop_after_calls=True, rejects_additional_properties=True)
KIMI = Quirks(ids="kimi")
VLLM = Quirks(ids="none")
VLLM_MARKUP = Quirks(markup=True)
DEEPSEEK = Quirks(reasoning_required=True, rejects_dotted_names=True)
VLLM_QWEN = Quirks(late_system_refused=True)
VLLM_GEMMA = Quirks(rejects_system=True)
REJECTS_STREAM_OPTIONS = Quirks(rejects_stream_options=True, usage=False)
NO_USAGE = Quirks(usage=False)
CUT_STOP = Quirks(cut_finish="stop")
CUT_UNFINISHED = Quirks(cut_finish="none")
OPENAI = Quirks()
OPENAI_FRAGMENTS = Quirks(fragments=True)


def _openai_error(message: str, param: str | None = None) -> Response:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return Response(orjson.dumps({"error": error}), 400, media_type="application/json")


def _mentions(value: Any, name: str) -> bool:
    if isinstance(value, dict):
        return name in value or any(_mentions(item, name) for item in value.values())
    if isinstance(value, list):
        return any(_mentions(item, name) for item in value)
    return False


@dataclass
class FakeUpstream:
    quirks: Quirks
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    responses_requests: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0

    def app(self) -> Starlette:
        middleware = [Middleware(GZipMiddleware, minimum_size=0)] if self.quirks.gzip else []
        routes = [
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"]),
        ]
        return Starlette(routes=routes, middleware=middleware)

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.quirks.echoes_key and body["messages"][0]["role"] == "developer":
            key = request.headers.get("authorization", "").removeprefix("Bearer ")
            error = {"message": f"Incorrect API key provided: {key}.", "type": "auth"}
            return Response(orjson.dumps({"error": error}), 401, media_type="application/json")
        refusal = self._refusal(body)
        if refusal is not None:
            return refusal
        calls = self._calls(body)
        if body.get("stream"):
            return Response(self._stream(body, calls), media_type="text/event-stream")
        return Response(orjson.dumps(self._json(body, calls)), media_type="application/json")

    async def responses(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.responses_requests.append(body)
        if not self.quirks.native_responses:
            return PlainTextResponse("Not Found", 404)  # Starlette's answer for no route
        given = body.get("input")
        if not isinstance(given, str | list):
            kind = "an integer" if isinstance(given, int) else type(given).__name__
            if self.quirks.native_responses == "vllm":
                message = (
                    "2 validation errors:\n  {'type': 'string_type', 'loc': ('body', 'input', "
                    f"'str'), 'msg': 'Input should be a valid string', 'input': {given!r}}}\n  "
                    "{'type': 'list_type', 'loc': ('body', 'input', 'list[...]'), 'msg': "
                    f"'Input should be a valid list', 'input': {given!r}}}"
                )
                error = {"message": message, "type": "BadRequestError", "param": None}
                content = orjson.dumps({"error": {**error, "code": 400}})
                return Response(content, 400, media_type="application/json")
            error = {
                "message": "Invalid type for 'input': expected one of a string or array of "
                f"input items, but got {kind} instead.",
                "type": "invalid_request_error",
                "param": "input",
                "code": "invalid_type",
            }
            return Response(orjson.dumps({"error": error}), 400, media_type="application/json")
        text = {"type": "output_text", "text": "Hello", "annotations": []}
        output = {"type": "message", "id": "msg_doctor", "role": "assistant", "content": [text]}
        answer = {"id": "resp_doctor", "object": "response", "status": "completed"}
        return Response(orjson.dumps({**answer, "output": [output]}), media_type="application/json")

    def _refusal(self, body: dict[str, Any]) -> Response | None:
        tools = body.get("tools") or []
        messages = body.get("messages") or []
        late = [m for m in messages[1:] if m.get("role") == "system"]
        if self.quirks.late_system_refused and late:
            error = {
                "message": "System message must be at the beginning.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
            return Response(orjson.dumps({"error": error}), 400, media_type="application/json")
        if self.quirks.rejects_system and any(m.get("role") == "system" for m in messages):
            error = {
                "object": "error",
                "message": "System role not supported",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
            return Response(orjson.dumps(error), 400, media_type="application/json")
        if self.quirks.rejects_stream_options and "stream_options" in body:
            return _openai_error("Unrecognized request argument supplied: stream_options")
        if self.quirks.rejects_additional_properties and _mentions(tools, "additionalProperties"):
            status, content = gemini_unknown_name("additionalProperties")
            return Response(content, status, media_type="application/json")
        for i, tool in enumerate(tools):
            if self.quirks.rejects_dotted_names and "." in tool["function"]["name"]:
                return _openai_error(
                    f"Invalid 'tools[{i}].function.name': string does not match pattern. "
                    "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                    f"tools[{i}].function.name",
                )
        for message in body.get("messages") or ():
            if (
                self.quirks.reasoning_required
                and message.get("role") == "assistant"
                and message.get("tool_calls")
                and message.get("reasoning_content") != REASONING
            ):
                return _openai_error(DEEPSEEK_MESSAGE)
        return None

    def _calls(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        tools = body.get("tools") or []
        messages = body.get("messages") or []
        if body.get("tool_choice") == "required":
            chosen = tools
        elif tools and messages and messages[-1].get("role") == "tool":
            chosen = tools[:1]  # round two: the same tool again, for another city
        else:
            return []
        self.rounds += 1
        calls = []
        for i, tool in enumerate(chosen):
            name = tool["function"]["name"]
            call_id = (
                f"functions.{name}:{i}" if self.quirks.ids == "kimi" else f"call_{self.rounds}_{i}"
            )
            calls.append({"id": call_id, "name": name, "arguments": '{"city": "Paris"}'})
        return calls

    def _entry(self, i: int, call: dict[str, Any]) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": i} if self.quirks.index else {}
        if self.quirks.ids == "none":
            return {**entry, "type": "function", "function": {"arguments": call["arguments"]}}
        function = {"name": call["name"], "arguments": call["arguments"]}
        return {**entry, "id": call["id"], "type": "function", "function": function}

    def _stream_entries(self, i: int, call: dict[str, Any]) -> list[dict[str, Any]]:
        """A call's entries as streamed: whole, or OpenAI's opening delta then fragments."""
        entry = self._entry(i, call)
        if not self.quirks.fragments:
            return [entry]
        arguments = entry["function"]["arguments"]
        opening = {**entry, "function": {**entry["function"], "arguments": ""}}
        pieces = [arguments[n : n + 4] for n in range(0, len(arguments), 4)]
        return [opening, *({"index": i, "function": {"arguments": p}} for p in pieces)]

    def _markup(self, calls: list[dict[str, Any]]) -> str:
        return "".join(
            f'<tool_call>{{"name": "{c["name"]}", "arguments": {c["arguments"]}}}</tool_call>'
            for c in calls
        )

    def _stream(self, body: dict[str, Any], calls: list[dict[str, Any]]) -> bytes:
        envelope = {"id": "chatcmpl-doctor", "object": "chat.completion.chunk", "created": 1}
        envelope["model"] = body.get("model")
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if self.quirks.reasoning_required:
            deltas.append({"reasoning_content": REASONING})
        if calls and self.quirks.markup:
            deltas.append({"content": self._markup(calls)})
        elif calls:
            for i, call in enumerate(calls):
                deltas += [{"tool_calls": [entry]} for entry in self._stream_entries(i, call)]
        elif body.get("max_tokens") == 1:
            deltas.append({"content": "Once"})  # one token of the long answer asked for
        else:
            deltas.append({"content": "Hello"})
        finish = "tool_calls" if calls and not self.quirks.markup else "stop"
        if calls and self.quirks.stop_after_calls:
            finish = "stop"
        if not calls and body.get("max_tokens") == 1:
            finish = self.quirks.cut_finish
        chunks = [{**envelope, "choices": [{"index": 0, "delta": d}]} for d in deltas]
        if finish != "none":
            last = {"index": 0, "delta": {}, "finish_reason": finish}
            chunks.append({**envelope, "choices": [last]})
        options = body.get("stream_options") or {}
        if self.quirks.usage and options.get("include_usage"):
            usage = {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}
            chunks.append({**envelope, "choices": [], "usage": usage})
        events = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks]
        return b"".join(events) + b"data: [DONE]\n\n"

    def _json(self, body: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else "Hello"}
        if self.quirks.reasoning_required:
            message["reasoning_content"] = REASONING
        if calls and self.quirks.markup:
            message["content"] = self._markup(calls)
        elif calls:
            entries = [self._entry(i, c) for i, c in enumerate(calls)]
            message["tool_calls"] = [{k: v for k, v in e.items() if k != "index"} for e in entries]
        finish = "tool_calls" if "tool_calls" in message else "stop"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return {
            "id": "chatcmpl-doctor",
            "object": "chat.completion",
            "created": 1,
            "model": body.get("model"),
            "choices": [choice],
        }


@contextmanager
def running(quirks: Quirks) -> Iterator[tuple[str, FakeUpstream]]:
    """The fake served on 127.0.0.1; yields its base URL (`…/v1`) and the fake."""
    fake = FakeUpstream(quirks)
    with serve_in_thread(fake.app()) as url:
        yield f"{url}/v1", fake
