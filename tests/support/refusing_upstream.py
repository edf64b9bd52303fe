"""A fake upstream on a plain loopback host (127.0.0.1, no vendor in the URL or the model) that
refuses a request as one real upstream does, with that upstream's real body, and answers it
otherwise: the upstream behind a gateway, a tunnel or a self-hosted server, where no profile
applies and only the refusal says what it wants.

`RefusingUpstream(refuses)`: `refuses(body, raw)` is one of the checkers of the fakes that
already play each upstream (tests/support/message_upstreams.py, tool_name_upstream.py, the
schema fakes of tests/repair/repairs/test_tool_schemas.py, the DeepSeek fake's response formats
in reasoning_upstreams.py), as `Rejection` (status, content type, body) or None. `fixed`
answers every request with one rejection whatever it carries (a 429, a 500, a text that only
looks like a refusal).

An accepted request is answered, streamed (SSE, `[DONE]`) when it asked for a stream: when its
last message is the user's and it declares tools, with one call of the first declared tool by
the name it was sent (`ARGUMENTS`; streamed as an opening delta and two argument fragments);
else with `ANSWER_PREFIX` and the last message's content. Every raw body is kept in `received`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from tests.repair.repairs.test_tool_schemas import fake_gemini, fake_moonshot
from tests.support.reasoning_upstreams import deepseek_response_format
from tests.support.servers import serve_in_thread
from tests.support.tool_name_upstream import ToolNameUpstream

Rejection = tuple[int, str, bytes]
Checker = Callable[[dict[str, Any], bytes], Rejection | None]

JSON = "application/json"
ARGUMENTS = {"path": "a.txt"}
CALL_ID = "call_learn_1"
ANSWER_PREFIX = "The file says: "


def gemini_schemas(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """Gemini's 400 for a tool schema keyword or a type array (test_tool_schemas.fake_gemini)."""
    status, error = fake_gemini(body)
    return None if status == 200 else (status, JSON, orjson.dumps(error))


def moonshot_schemas(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """Moonshot's 400 for a schema node it cannot read (test_tool_schemas.fake_moonshot)."""
    status, error = fake_moonshot(body)
    return None if status == 200 else (status, JSON, orjson.dumps(error))


def deepseek_formats(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """DeepSeek's 400 for a `response_format` it refuses: a JSON schema, or JSON mode without
    the word "json" in the prompt (reasoning_upstreams.deepseek_response_format)."""
    error = deepseek_response_format(body)
    return None if error is None else (400, JSON, orjson.dumps(error))


def tool_names(rule: str) -> Checker:
    """Gemini's or OpenAI's 400 for a tool name its rule rejects (tool_name_upstream.py)."""
    fake = ToolNameUpstream(rule)

    def check(body: dict[str, Any], raw: bytes) -> Rejection | None:
        refused = fake.refusal(body)
        return None if refused is None else (400, JSON, refused)

    return check


@dataclass
class RefusingUpstream:
    refuses: Checker
    fixed: Rejection | None = None
    received: list[bytes] = field(default_factory=list)

    def bodies(self) -> list[dict[str, Any]]:
        return [orjson.loads(raw) for raw in self.received]

    def refused(self) -> list[bool]:
        """Per request received, whether it was refused."""
        return [
            self.fixed is not None or self.refuses(orjson.loads(raw), raw) is not None
            for raw in self.received
        ]

    async def chat(self, request: Request) -> Response:
        raw = await request.body()
        self.received.append(raw)
        body = orjson.loads(raw)
        rejection = self.fixed or self.refuses(body, raw)
        if rejection is not None:
            status, media_type, content = rejection
            return Response(content, status, media_type=media_type)
        return _answer(body)


def _answer(body: dict[str, Any]) -> Response:
    messages = body.get("messages") or [{}]
    last = messages[-1]
    envelope = {"id": "chatcmpl-learn", "created": 1, "model": str(body.get("model"))}
    calls: list[dict[str, Any]] = []
    if last.get("role") == "user" and body.get("tools"):
        name = body["tools"][0]["function"]["name"]
        arguments = orjson.dumps(ARGUMENTS).decode()
        calls = [
            {"id": CALL_ID, "type": "function", "function": {"name": name, "arguments": arguments}}
        ]
        content, finish = None, "tool_calls"
    else:
        said = last.get("content")
        content, finish = ANSWER_PREFIX + (said if isinstance(said, str) else "(parts)"), "stop"
    if not body.get("stream"):
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        choice = {"index": 0, "message": message, "finish_reason": finish}
        completion = {**envelope, "object": "chat.completion", "choices": [choice]}
        return Response(orjson.dumps(completion), media_type=JSON)
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": content or ""}]
    for call in calls:
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        opening = {**call, "index": 0, "function": {"name": call["function"]["name"]}}
        opening["function"]["arguments"] = arguments[:half]
        deltas += [
            {"tool_calls": [opening]},
            {"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]},
        ]
    chunks = [{"index": 0, "delta": delta, "finish_reason": None} for delta in deltas]
    chunks.append({"index": 0, "delta": {}, "finish_reason": finish})
    events = [
        b"data: "
        + orjson.dumps({**envelope, "object": "chat.completion.chunk", "choices": [chunk]})
        + b"\n\n"
        for chunk in chunks
    ]
    return Response(b"".join(events) + b"data: [DONE]\n\n", media_type="text/event-stream")


@contextmanager
def running_refusing_upstream(fake: RefusingUpstream) -> Iterator[str]:
    """Serves `fake` on 127.0.0.1; yields its base URL (`…/v1`)."""
    app = Starlette()
    app.add_route("/v1/chat/completions", fake.chat, methods=["POST"])
    with serve_in_thread(app) as root:
        yield f"{root}/v1"
