"""A fake upstream that refuses request parameters as real ones do, with their real bodies.

`RejectingUpstream(rejects)`: `rejects` maps a top-level parameter to the (status, body) the
upstream answers when a request carries it (a callable of the value may decide, for value
rules). A request carrying none gets a completion: streamed (SSE, `[DONE]`) when it asked for
a stream, else JSON. Every request body is recorded, as bytes, in `requests`.

The error bodies below are each provider's, as public reports quote them (cited on each).
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
from starlette.routing import Route

from tests.support.servers import serve_in_thread

Rejection = tuple[int, bytes]


def gemini_unknown_name(name: str) -> Rejection:
    """Gemini's OpenAI endpoint, a list around the error (Routstr/routstr-core#505)."""
    message = f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.'
    body = [
        {
            "error": {
                "code": 400,
                "message": message,
                "status": "INVALID_ARGUMENT",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.BadRequest",
                        "fieldViolations": [{"description": message}],
                    }
                ],
            }
        }
    ]
    return 400, orjson.dumps(body)


def mistral_extra_forbidden(name: str, value: Any) -> Rejection:
    """Mistral's 422 (editor-code-assistant/eca#231)."""
    detail = [
        {
            "type": "extra_forbidden",
            "loc": ["body", name],
            "msg": "Extra inputs are not permitted",
            "input": value,
        }
    ]
    body = {
        "object": "error",
        "message": {"detail": detail},
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    return 422, orjson.dumps(body)


def groq_unsupported(name: str, suggestion: str) -> Rejection:
    """Groq (fanenr/chatbot#21)."""
    message = f"property '{name}' is unsupported, did you mean '{suggestion}'?"
    return 400, orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})


def openai_unknown_parameter(name: str) -> Rejection:
    """OpenAI's shape (QuantumNous/new-api#418)."""
    error = {
        "message": f"Unknown parameter: '{name}'.",
        "type": "invalid_request_error",
        "param": name,
        "code": "unknown_parameter",
    }
    return 400, orjson.dumps({"error": error})


def cerebras_value_unsupported(name: str, value: Any) -> Rejection:
    """Cerebras (agno-agi/agno#4508)."""
    body = {
        "message": f"{name}={value} is not supported by this model.",
        "type": "invalid_request_error",
        "param": name,
        "code": "wrong_api_format",
    }
    return 400, orjson.dumps(body)


Rule = Rejection | Callable[[Any], Rejection | None]


@dataclass
class RejectingUpstream:
    rejects: dict[str, Rule] = field(default_factory=dict)
    requests: list[bytes] = field(default_factory=list)
    fixed: Rejection | None = None
    """Answer every request with this (a 429, a 500), whatever it carries."""

    def bodies(self) -> list[dict[str, Any]]:
        return [orjson.loads(raw) for raw in self.requests]

    async def chat(self, request: Request) -> Response:
        raw = await request.body()
        self.requests.append(raw)
        body = orjson.loads(raw)
        if self.fixed is not None:
            return _error(self.fixed)
        for name, rule in self.rejects.items():
            if name not in body:
                continue
            rejection = rule(body[name]) if callable(rule) else rule
            if rejection is not None:
                return _error(rejection)
        if body.get("stream"):
            events = [
                {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [c]}
                for c in (
                    {"index": 0, "delta": {"role": "assistant", "content": "hi"}},
                    {"index": 0, "delta": {}, "finish_reason": "stop"},
                )
            ]
            sse = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
            return Response(sse + b"data: [DONE]\n\n", media_type="text/event-stream")
        completion = {
            "id": "c1",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                }
            ],
        }
        return Response(orjson.dumps(completion), media_type="application/json")


def _error(rejection: Rejection) -> Response:
    status, body = rejection
    return Response(body, status_code=status, media_type="application/json")


@contextmanager
def running_rejecting_upstream(fake: RejectingUpstream) -> Iterator[str]:
    """Serves `fake`; yields its base URL (`…/v1`)."""
    routes = [Route("/v1/chat/completions", fake.chat, methods=["POST"])]
    with serve_in_thread(Starlette(routes=routes)) as root:
        yield f"{root}/v1"
