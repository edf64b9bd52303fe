"""A chat upstream that counts its prompt by a tokenizer-like rule of its own, and says so in
`usage` the way OpenRouter does.

The count is not the request's bytes over a constant: like a real server it counts what its
chat template renders, the text of each message (contents, call names and arguments, result
ids) and the tools' JSON, at `TOKENS_PER_BYTE` of that text, plus `PER_MESSAGE` tokens of
framing a message. The JSON around the text (keys, quotes, escapes) is no token of it, so a
proxy that knows only the request's size is near, never exact, and a token per four bytes of
JSON is well off.

Its cache is the system prompt's: the first request with a given system text writes it
(`prompt_tokens_details.cache_write_tokens`), a later one reads it (`cached_tokens`), both
inside `prompt_tokens`, as OpenRouter reports Anthropic's and Gemini's caches.

Answers: one text, streamed (its usage in the last chunk, when `stream_options.include_usage`
asks, as OpenAI sends it) or whole. Every request is kept with its raw body, every usage sent
in `usages`.
"""

from __future__ import annotations

import math
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
from tests.support.servers import serve_in_thread

TOKENS_PER_BYTE = 1 / 3.2
"""Of the text the template renders."""
PER_MESSAGE = 4
ANSWER = "Read it: the function is fine."
COMPLETION_TOKENS = 9


def rendered_text(message: dict[str, Any]) -> str:
    """What the template writes of one chat message, without its framing."""
    pieces = [str(message.get("role", ""))]
    content = message.get("content")
    if isinstance(content, str):
        pieces.append(content)
    elif isinstance(content, list):
        pieces += [p.get("text", "") for p in content if isinstance(p, dict)]
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        pieces += [call.get("id", ""), function.get("name", ""), function.get("arguments", "")]
    if isinstance(message.get("tool_call_id"), str):
        pieces.append(message["tool_call_id"])
    return "".join(pieces)


def prompt_tokens_of(body: dict[str, Any]) -> int:
    """This upstream's count of a chat request's prompt."""
    messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
    text = sum(len(rendered_text(m).encode()) for m in messages)
    tools = len(orjson.dumps(body["tools"])) if body.get("tools") else 0
    return math.ceil((text + tools) * TOKENS_PER_BYTE) + PER_MESSAGE * len(messages)


def system_tokens_of(body: dict[str, Any]) -> int:
    system = [m for m in body.get("messages") or () if m.get("role") == "system"]
    return math.ceil(sum(len(rendered_text(m).encode()) for m in system) * TOKENS_PER_BYTE)


@dataclass
class TokenCountingUpstream:
    requests: list[RecordedRequest] = field(default_factory=list)
    usages: list[dict[str, Any]] = field(default_factory=list)
    cached_systems: set[str] = field(default_factory=set)
    app: Starlette = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = prompt_tokens_of(body)
        system = "".join(
            rendered_text(m) for m in body.get("messages") or () if m.get("role") == "system"
        )
        details = {"cached_tokens": 0, "cache_write_tokens": 0}
        if system:
            key = "cached_tokens" if system in self.cached_systems else "cache_write_tokens"
            details[key] = system_tokens_of(body)
            self.cached_systems.add(system)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": prompt + COMPLETION_TOKENS,
            "prompt_tokens_details": details,
        }

    async def _chat(self, request: Request) -> Response:
        raw = await request.body()
        body = orjson.loads(raw)
        self.requests.append(
            RecordedRequest(
                method="POST",
                path=request.url.path,
                query=request.url.query,
                headers=dict(request.headers.items()),
                body=body,
                raw=raw,
            )
        )
        usage = self.usage(body)
        self.usages.append(usage)
        model = body.get("model", "m")
        top = {"id": "chatcmpl-count", "created": 1767225600, "model": model}
        if not body.get("stream"):
            message = {"role": "assistant", "content": ANSWER}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            completion = {**top, "object": "chat.completion", "choices": [choice], "usage": usage}
            return Response(orjson.dumps(completion), media_type="application/json")
        chunk = {**top, "object": "chat.completion.chunk"}

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return b"data: " + orjson.dumps({**chunk, "choices": choices, **extra}) + b"\n\n"

        events = [
            event([{"index": 0, "delta": {"role": "assistant", "content": ANSWER}}]),
            event([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(event([], usage=usage))
        events.append(b"data: [DONE]\n\n")
        return StreamingResponse(iter(events), media_type="text/event-stream")


@contextmanager
def running_token_counting_upstream() -> Iterator[tuple[TokenCountingUpstream, str]]:
    """The fake, and its base URL (`…/v1`)."""
    fake = TokenCountingUpstream()
    with serve_in_thread(fake.app) as url:
        yield fake, f"{url}/v1"
