"""A chat upstream on 127.0.0.1 for one real Claude Code session through the Messages door:
strict about where a request goes, refusing what real upstreams refuse with their real bodies,
and answering by what the request contains (not by its place in a script, so Claude Code's
side requests, retries and resends are answered as a model would answer them).

Where a request may go: only `POST /v1/chat/completions` with no query string. Anything else
gets the real vendor's refusal (scripted_chat_upstream.wrong_target): another path OpenAI's
404, a query parameter Google's 400 (`Unknown name "beta": Cannot bind query parameter. …`,
what Claude Code's `?beta=true` gets from Google's front end when a door passes it on).

What it refuses besides: a forced `tool_choice` (`"required"` or a named function) while
thinking is on, with DeepSeek's 400 `Thinking mode does not support this tool_choice`
(deepseek-ai/DeepSeek-V3#1376; Qwen's DashScope refuses the same pairing). Thinking is on
unless the request turns it off with `thinking: {"type": "disabled"}`: DeepSeek V4 thinks by
default, whatever `reasoning_effort` says.

What it answers (each a `Playbook` entry's model):
- the main model: a call of `Read` on the PDF until a tool result is back (prose when it
  declares no `Read`); then, when the PDF
  reached it as a chat `file` part (`{"type": "file", "file": {"filename": …, "file_data":
  "data:application/pdf;base64,…"}}`, anywhere in the messages) holding exactly the file's
  bytes, `PDF_ANSWER`; otherwise `NO_PDF_ANSWER`.
- the side model: with tools, a call of the forced tool (or the first) with `{"title": …}`;
  asked for structured output (`response_format` json_schema or json_object), a JSON object
  giving the title to every required name (`title` without a schema); otherwise prose.
- any other model: OpenAI's 404 `model_not_found`.

Usage as Gemini's OpenAI-compatible endpoint reports it: a `usage` object on every chunk, the
first included, `prompt_tokens` the playbook's (a compaction-sized context), so what a door
tells its client of the context can be read before the first block as well as at the end.

Every request is kept in `seen` with the status it got and, when refused, why.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.fake_upstream import RecordedRequest
from tests.support.scripted_chat_upstream import openai_error_body, wrong_target
from tests.support.servers import serve_in_thread

FORCED_TOOL_MESSAGE = "Thinking mode does not support this tool_choice"
PDF_ANSWER = "The PDF reached me whole."
NO_PDF_ANSWER = "No PDF reached me."
SIDE_PROSE = "A session that reads a PDF."
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


@dataclass(frozen=True)
class Playbook:
    """What the session is about: the models, the PDF Claude Code reads, the title, and the
    prompt tokens every answer reports."""

    main_model: str
    side_model: str
    pdf_path: str
    pdf: bytes
    title: str
    prompt_tokens: int = 150_000

    @property
    def pdf_data_url(self) -> str:
        return "data:application/pdf;base64," + base64.b64encode(self.pdf).decode()


@dataclass
class Seen:
    """One request as it reached the upstream, the status it got, and why it was refused."""

    request: RecordedRequest
    status: int
    refused: str | None = None

    @property
    def model(self) -> Any:
        body = self.request.json
        return body.get("model") if isinstance(body, dict) else None


def forced_tool(body: dict[str, Any]) -> str | None:
    """The tool a request forces (`"required"`: the first declared), or None."""
    choice = body.get("tool_choice")
    tools = body.get("tools") or [{}]
    if choice == "required":
        return str((tools[0].get("function") or {}).get("name"))
    if isinstance(choice, dict) and choice.get("type") == "function":
        return str((choice.get("function") or {}).get("name"))
    return None


def thinking_on(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return not (isinstance(thinking, dict) and thinking.get("type") == "disabled")


def file_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every chat `file` content part in the request's messages."""
    parts = []
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "file":
                parts.append(part)
    return parts


def declared(body: dict[str, Any]) -> list[str]:
    """The names of the functions a request declares."""
    return [
        str((tool.get("function") or {}).get("name"))
        for tool in body.get("tools") or ()
        if isinstance(tool, dict)
    ]


def has_tool_result(body: dict[str, Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "tool" for m in body.get("messages") or ())


@dataclass
class Answer:
    """A completion to send: text, or one call of `tool` with `arguments`."""

    text: str = ""
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionUpstream:
    playbook: Playbook
    seen: list[Seen] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=itertools.count, repr=False)

    def __post_init__(self) -> None:
        self.app = Starlette(routes=[Route("/{path:path}", self._any, methods=METHODS)])

    # what tests ask

    def answered(self, model: str) -> list[Seen]:
        return [s for s in self.seen if s.model == model and s.status == 200]

    def refused(self, message: str) -> list[Seen]:
        return [s for s in self.seen if s.refused is not None and message in s.refused]

    def pdf_arrived(self, part: dict[str, Any]) -> bool:
        """Whether `part` is a chat file part holding the playbook's PDF, with a filename."""
        file = part.get("file")
        return (
            isinstance(file, dict)
            and isinstance(file.get("filename"), str)
            and bool(file["filename"])
            and file.get("file_data") == self.playbook.pdf_data_url
        )

    # the one route

    async def _any(self, request: Request) -> Response:
        recorded = await RecordedRequest.read(request)
        wrong = wrong_target(recorded.method, recorded.path, recorded.query)
        if wrong is not None:
            status, error, message = wrong
            return self._refuse(recorded, status, error, message)
        body = recorded.json
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            message = "We could not parse the JSON body of your request."
            return self._refuse(recorded, 400, openai_error_body(message), message)
        if forced_tool(body) is not None and thinking_on(body):
            error = {
                "error": {
                    "message": FORCED_TOOL_MESSAGE,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_request_error",
                }
            }
            return self._refuse(recorded, 400, error, FORCED_TOOL_MESSAGE)
        answer = self._answer(body)
        if answer is None:
            message = (
                f"The model `{body.get('model')}` does not exist or you do not have access to it."
            )
            return self._refuse(
                recorded, 404, openai_error_body(message, "model_not_found"), message
            )
        self.seen.append(Seen(recorded, 200))
        model = str(body["model"])
        if body.get("stream"):
            return StreamingResponse(
                iter(self._chunks(answer, model)),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        return Response(
            orjson.dumps(self._completion(answer, model)), media_type="application/json"
        )

    def _refuse(self, recorded: RecordedRequest, status: int, error: Any, why: str) -> Response:
        self.seen.append(Seen(recorded, status, why))
        return Response(orjson.dumps(error), status, media_type="application/json")

    # answers, by what the request holds

    def _answer(self, body: dict[str, Any]) -> Answer | None:
        book = self.playbook
        model = body.get("model")
        if model == book.main_model:
            if not has_tool_result(body) and "Read" in declared(body):
                return Answer(tool="Read", arguments={"file_path": book.pdf_path})
            if not has_tool_result(body):
                return Answer(SIDE_PROSE)  # a request of the main model's without its tools
            arrived = any(self.pdf_arrived(part) for part in file_parts(body))
            return Answer(PDF_ANSWER if arrived else NO_PDF_ANSWER)
        if model == book.side_model:
            if body.get("tools"):
                name = forced_tool(body) or str(body["tools"][0]["function"]["name"])
                return Answer(tool=name, arguments={"title": book.title})
            response_format = body.get("response_format")
            if isinstance(response_format, dict) and response_format.get("type") in (
                "json_schema",
                "json_object",
            ):
                schema = (response_format.get("json_schema") or {}).get("schema") or {}
                names = schema.get("required") or ["title"]
                return Answer(orjson.dumps(dict.fromkeys(names, book.title)).decode())
            return Answer(SIDE_PROSE)
        return None

    def _usage(self, completion_tokens: int) -> dict[str, int]:
        prompt = self.playbook.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        }

    def _call(self, answer: Answer) -> dict[str, Any]:
        return {
            "id": f"call_session_{next(self._ids)}",
            "type": "function",
            "function": {"name": answer.tool, "arguments": orjson.dumps(answer.arguments).decode()},
        }

    def _chunks(self, answer: Answer, model: str) -> list[bytes]:
        envelope = {"id": "chatcmpl-session", "object": "chat.completion.chunk", "model": model}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if answer.tool is not None:
            deltas.append({"tool_calls": [{"index": 0, **self._call(answer)}]})
        else:
            half = len(answer.text) // 2
            deltas += [{"content": answer.text[:half]}, {"content": answer.text[half:]}]
        finish = "tool_calls" if answer.tool is not None else "stop"
        chunks = []
        for n, delta in enumerate(deltas):
            choice = {"index": 0, "delta": delta, "finish_reason": None}
            chunks.append({**envelope, "choices": [choice], "usage": self._usage(n)})
        last = {"index": 0, "delta": {}, "finish_reason": finish}
        chunks.append({**envelope, "choices": [last], "usage": self._usage(len(deltas))})
        return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]

    def _completion(self, answer: Answer, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
        if answer.tool is not None:
            message["tool_calls"] = [self._call(answer)]
        finish = "tool_calls" if answer.tool is not None else "stop"
        return {
            "id": "chatcmpl-session",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self._usage(3),
        }


@contextmanager
def running_session_upstream(playbook: Playbook) -> Iterator[tuple[SessionUpstream, str]]:
    """A SessionUpstream under uvicorn on loopback; it and its root URL (the proxy's upstream
    base URL is `<root>/v1`)."""
    fake = SessionUpstream(playbook)
    with serve_in_thread(fake.app) as root:
        yield fake, root
