"""Anthropic's own Messages API, as far as a resumed transcript's ids go: `POST /v1/messages`
refuses a `tool_use.id` or a `tool_result.tool_use_id` outside `^[a-zA-Z0-9_-]+$` with the 400
Anthropic answers (its body as public reports quote it: `messages.5.content.0.tool_use.id:
String should match pattern '^[a-zA-Z0-9_-]+$'`), and answers anything else with one text
message. For a client that resumes, against Anthropic, a session begun through the proxy."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.servers import serve_in_thread

PATTERN = "^[a-zA-Z0-9_-]+$"


def id_refusal(body: dict[str, Any]) -> str | None:
    """Anthropic's message for the first id outside its pattern, or None."""
    for i, message in enumerate(body.get("messages") or ()):
        content = message.get("content")
        for j, block in enumerate(content if isinstance(content, list) else ()):
            for kind, name in (("tool_use", "id"), ("tool_result", "tool_use_id")):
                value = block.get(name)
                if block.get("type") == kind and not re.fullmatch(PATTERN, str(value)):
                    where = f"messages.{i}.content.{j}.{kind}.{name}"
                    return f"{where}: String should match pattern '{PATTERN}'"
    return None


@dataclass
class AnthropicMessagesUpstream:
    refusals: list[str] = field(default_factory=list)
    app: Starlette = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.app = Starlette(routes=[Route("/v1/messages", self._messages, methods=["POST"])])

    async def _messages(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        refusal = id_refusal(body)
        if refusal is not None:
            self.refusals.append(refusal)
            error = {"type": "invalid_request_error", "message": refusal}
            return Response(
                orjson.dumps({"type": "error", "error": error}),
                status_code=400,
                media_type="application/json",
            )
        message = {
            "id": "msg_01resumed",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [{"type": "text", "text": "Resumed."}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 2},
        }
        return Response(orjson.dumps(message), media_type="application/json")


@contextmanager
def running_anthropic_upstream() -> Iterator[tuple[AnthropicMessagesUpstream, str]]:
    """The fake, and the root URL the Anthropic SDK takes as its base URL."""
    fake = AnthropicMessagesUpstream()
    with serve_in_thread(fake.app) as url:
        yield fake, url
