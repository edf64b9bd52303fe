"""A fake upstream that refuses tool names the way Gemini's or OpenAI's API does, and otherwise
calls the first declared tool by the name it was sent.

`ToolNameUpstream(rule="gemini")` serves Gemini's OpenAI endpoint
(`/v1beta/openai/chat/completions`): a request declaring a function whose name does not start
with a letter or `_`, has a character outside `a-zA-Z0-9_.:-` or passes 64 characters gets
Gemini's 400, a JSON array with one error, one line per bad declaration, in the words of
cline/cline#7339 (the same rule in kaitranntt/ccs#25, google-gemini/gemini-cli#2966,
microsoft/vscode-copilot-release#7928 for the array form). `rule="openai"` serves
`/v1/chat/completions` and refuses the first name outside `^[a-zA-Z0-9_-]+$` or over 64
characters, in the tools (brekkylab/ailoy#109, openai/codex#1289) and in the history's calls
(mcp-use/mcp-use#90), with OpenAI's error object.

The rules are written here from those bodies, not taken from the proxy.

First request (the last message is not a `tool` message): one call of the first declared tool,
`{"path": "a.txt"}`, finish "tool_calls"; streamed as a role chunk, an opening delta with id,
type and name, then the arguments in two fragments. Follow-up: the text `ANSWER_PREFIX` and
the tool message's content. Every request is kept in `requests`, every refusal in `rejections`.
"""

from __future__ import annotations

import re
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
from tests.support.gemini_upstream import gemini_error_body
from tests.support.servers import serve_in_thread

GEMINI_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}")
OPENAI_NAME = re.compile(r"[a-zA-Z0-9_-]+")
GEMINI_NAME_MESSAGE = (
    "* GenerateContentRequest.tools[0].function_declarations[{index}].name: Invalid function "
    "name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), "
    "underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 64.\n"
)
ARGUMENTS = {"path": "a.txt"}
CALL_ID = "call_read_1"
ANSWER_PREFIX = "The file says: "
PATHS = {"gemini": "/v1beta/openai", "openai": "/v1"}


def openai_error(message: str, param: str, code: str) -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return orjson.dumps({"error": error})


def declared_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or () if "function" in t]


def history_names(body: dict[str, Any]) -> list[str]:
    return [
        call["function"]["name"]
        for message in body.get("messages") or ()
        for call in message.get("tool_calls") or ()
    ]


@dataclass
class ToolNameUpstream:
    rule: str = "gemini"
    requests: list[RecordedRequest] = field(default_factory=list)
    rejections: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        path = PATHS[self.rule] + "/chat/completions"
        self.app = Starlette(routes=[Route(path, self._chat, methods=["POST"])])

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def clear(self) -> None:
        self.requests.clear()
        self.rejections.clear()

    def accepts(self, name: str) -> bool:
        if self.rule == "gemini":
            return GEMINI_NAME.fullmatch(name) is not None
        return OPENAI_NAME.fullmatch(name) is not None and len(name) <= 64

    async def _chat(self, request: Request) -> Response:
        recorded = await RecordedRequest.read(request)
        self.requests.append(recorded)
        body = recorded.body
        refusal = self.refusal(body)
        if refusal is not None:
            self.rejections.append(refusal)
            return Response(refusal, status_code=400, media_type="application/json")
        messages = body["messages"]
        if messages[-1].get("role") == "tool":
            return self._answer(body, {"role": "assistant", "content": None}, text=True)
        return self._answer(body, {"role": "assistant", "content": None}, text=False)

    def refusal(self, body: dict[str, Any]) -> bytes | None:
        """The 400 body the real upstream answers `body` with, or None when it takes it."""
        names = declared_names(body)
        if self.rule == "gemini":
            bad = [i for i, name in enumerate(names) if not self.accepts(name)]
            if not bad:
                return None
            return gemini_error_body("".join(GEMINI_NAME_MESSAGE.format(index=i) for i in bad))
        places = [(f"tools[{i}].function.name", name) for i, name in enumerate(names)]
        for m, message in enumerate(body.get("messages") or ()):
            for c, call in enumerate(message.get("tool_calls") or ()):
                name = call["function"]["name"]
                places.append((f"messages[{m}].tool_calls[{c}].function.name", name))
        for param, name in places:
            if len(name) > 64:
                return openai_error(
                    f"Invalid '{param}': string too long. Expected a string with maximum "
                    f"length 64, but got a string with length {len(name)} instead.",
                    param,
                    "string_above_max_length",
                )
            if not self.accepts(name):
                return openai_error(
                    f"Invalid '{param}': string does not match pattern. Expected a string "
                    "that matches the pattern '^[a-zA-Z0-9_-]+$'.",
                    param,
                    "invalid_value",
                )
        return None

    def _answer(self, body: dict[str, Any], message: dict[str, Any], *, text: bool) -> Response:
        envelope = {"id": "chatcmpl-names", "created": 1, "model": str(body.get("model"))}
        if text:
            content = ANSWER_PREFIX + str(body["messages"][-1].get("content"))
            finish = "stop"
            calls: list[dict[str, Any]] = []
        else:
            content, finish = None, "tool_calls"
            name = declared_names(body)[0]
            arguments = orjson.dumps(ARGUMENTS).decode()
            calls = [
                {
                    "id": CALL_ID,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ]
        if not body.get("stream"):
            whole = {**message, "content": content}
            if calls:
                whole["tool_calls"] = calls
            choice = {"index": 0, "message": whole, "finish_reason": finish}
            completion = {**envelope, "object": "chat.completion", "choices": [choice]}
            return Response(orjson.dumps(completion), media_type="application/json")
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if text:
            deltas.append({"content": content})
        for call in calls:
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            opening = {**call, "index": 0, "function": {"name": call["function"]["name"]}}
            opening["function"]["arguments"] = arguments[:half]
            deltas.append({"tool_calls": [opening]})
            rest = {"index": 0, "function": {"arguments": arguments[half:]}}
            deltas.append({"tool_calls": [rest]})
        chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        events = [
            b"data: " + orjson.dumps({**envelope, "object": "chat.completion.chunk", **c}) + b"\n\n"
            for c in chunks
        ]
        events.append(b"data: [DONE]\n\n")
        return StreamingResponse(iter(events), media_type="text/event-stream")


@contextmanager
def running_tool_name_upstream(rule: str = "gemini") -> Iterator[tuple[ToolNameUpstream, str]]:
    """The fake and its base URL (Gemini's `/v1beta/openai` or OpenAI's `/v1`)."""
    fake = ToolNameUpstream(rule)
    with serve_in_thread(fake.app) as root:
        yield fake, root + PATHS[rule]
