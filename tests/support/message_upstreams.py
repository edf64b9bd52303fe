"""Fake upstreams that reject the message shapes their real counterparts reject.

Each `Checker` looks at a request as the real upstream would and returns its rejection
(status, content type, body bytes) or None. The bodies are the ones public reports quote, where
they quote one (each checker names its source); the rest of the envelope is the upstream's usual
one. `MessageUpstream` serves a list of checkers on `POST /v1/chat/completions`, records every
raw body it receives, and answers an accepted request: with a tool call (while its `call_ids`
last) when the conversation's last message is the user's and tools are declared, else with text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.servers import serve_in_thread

Rejection = tuple[int, str, bytes]
Checker = Callable[[dict[str, Any], bytes], Rejection | None]

JSON = "application/json"
NINE_ALNUM = re.compile(r"[A-Za-z0-9]{9}")


def _json(status: int, body: dict[str, Any]) -> Rejection:
    return status, JSON, orjson.dumps(body)


def _column(raw: bytes, needle: bytes) -> int:
    """Where serde stops: just past the offending value (1-based, one-line JSON)."""
    return raw.find(needle) + len(needle)


def deepseek_roles(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """DeepSeek: axum's JSON rejection, plain text, 422 (pi#7603)."""
    for index, message in enumerate(body.get("messages", [])):
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            column = _column(raw, f'"role":"{role}"'.encode())
            text = (
                "Failed to deserialize the JSON body into the target type: "
                f"messages[{index}]: unknown role: {role} at line 1 column {column}"
            )
            return 422, "text/plain; charset=utf-8", text.encode()
    return None


def mistral_roles(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """Mistral takes the roles system, user, assistant and tool; its 422 for any other is
    FastAPI's validation detail (no report quotes one for `developer`: the wording is ours)."""
    for index, message in enumerate(body.get("messages", [])):
        if message.get("role") not in ("system", "user", "assistant", "tool"):
            detail = {
                "type": "literal_error",
                "loc": ["body", "messages", index, "role"],
                "msg": "Input should be 'system', 'user', 'assistant' or 'tool'",
            }
            return _json(422, {"object": "error", "message": {"detail": [detail]}})
    return None


def qwen_template(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """vLLM serving Qwen 3.5+: the chat template raises for a system message at any index but
    0 (`if not loop.first`), answered as vLLM's 400 (vllm#41114)."""
    for index, message in enumerate(body.get("messages", [])):
        if index and message.get("role") == "system":
            return _json(
                400,
                {
                    "error": {
                        "message": "System message must be at the beginning.",
                        "type": "BadRequestError",
                        "param": None,
                        "code": 400,
                    }
                },
            )
    return None


def _mistral_error(message: str, kind: str = "invalid_request_error", code: Any = None) -> Any:
    return _json(
        400, {"object": "error", "message": message, "type": kind, "param": None, "code": code}
    )


def mistral_content(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """Mistral: calls beside a content, even an empty one (langchain#21196)."""
    for message in body.get("messages", []):
        calls = message.get("role") == "assistant" and message.get("tool_calls")
        if calls and message.get("content") is not None:
            return _mistral_error(
                "Assistant message must have either content or tool_calls, but not both."
            )
    return None


def mistral_ids(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """Mistral: every call id in the history nine alphanumerics (ironclaw#1241, eca#233), and
    (our wording) each result answering a call of the assistant message before it."""
    calls: set[str] = set()
    for message in body.get("messages", []):
        ids = [call.get("id") for call in message.get("tool_calls") or []]
        if message.get("role") == "tool":
            ids.append(message.get("tool_call_id"))
        for one in ids:
            if not isinstance(one, str) or not NINE_ALNUM.fullmatch(one):
                return _mistral_error(
                    f"Tool call id was {one} but must be a-z, A-Z, 0-9, with a length of 9.",
                    "invalid_function_call",
                    "3280",
                )
        if message.get("role") == "assistant":
            calls = {call["id"] for call in message.get("tool_calls") or []}
        elif message.get("role") == "tool" and message["tool_call_id"] not in calls:
            return _mistral_error(f"Tool call id {message['tool_call_id']} answers no call.")
    return None


def kimi_tool_content(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """Moonshot's Kimi: a tool result's content must deserialize into a string
    (kimi-cli#1762)."""
    for index, message in enumerate(body.get("messages", [])):
        if message.get("role") == "tool" and not isinstance(message.get("content"), str):
            column = _column(raw, b'"content":[') - 1
            text = (
                "Failed to deserialize the JSON body into the target type: "
                f"messages[{index}]: invalid type: sequence, expected a string "
                f"at line 1 column {column}"
            )
            return _json(400, {"error": {"message": text, "type": "invalid_request_error"}})
    return None


KIMI_ID = re.compile(r"functions\.[A-Za-z0-9_.-]+:\d+")


def kimi_ids(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """A Kimi K2 server (exo, MLX): the chat template renders each history id verbatim and
    names the function only through it; an id outside `functions.NAME:N` makes the model write
    ids of the wrong shape, its tool-call parser rejects them, and the non-streaming answer is
    a bare 500 whose body is not JSON (exo#2281)."""
    for message in body.get("messages", []):
        ids = [call.get("id") for call in message.get("tool_calls") or []]
        if message.get("role") == "tool":
            ids.append(message.get("tool_call_id"))
        if any(not isinstance(one, str) or not KIMI_ID.fullmatch(one) for one in ids):
            return 500, "text/plain; charset=utf-8", b"Internal Server Error"
    return None


def lmstudio_content(body: dict[str, Any], raw: bytes) -> Rejection | None:
    """LM Studio: a null content beside tool calls (lmstudio#261)."""
    for message in body.get("messages", []):
        if message.get("role") == "assistant" and message.get("content") is None:
            text = "Invalid 'content': 'content' field must be a string or an array of objects."
            return _json(400, {"error": text})
    return None


@dataclass
class MessageUpstream:
    checkers: Sequence[Checker]
    call_ids: Sequence[str] = ()
    """The ids of the calls it makes, one per user turn while they last (Mistral's are nine
    alphanumerics); then, and on a tool result, it answers with text."""
    received: list[bytes] = field(default_factory=list)
    made: int = 0

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        raw = await request.body()
        self.received.append(raw)
        body = orjson.loads(raw)
        for checker in self.checkers:
            rejection = checker(body, raw)
            if rejection is not None:
                status, media_type, content = rejection
                return Response(content, status, media_type=media_type)
        return Response(orjson.dumps(self._answer(body)), media_type=JSON)

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        message: dict[str, Any] = {"role": "assistant", "content": "It is sunny."}
        finish = "stop"
        if last.get("role") == "user" and body.get("tools") and self.made < len(self.call_ids):
            call_id = self.call_ids[self.made]
            self.made += 1
            name = body["tools"][0]["function"]["name"]
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": '{"city": "Paris"}'},
                    }
                ],
            }
            finish = "tool_calls"
        return {
            "id": f"cmpl-{len(self.received)}",
            "object": "chat.completion",
            "created": 1756557762,
            "model": body.get("model", "m"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }


@contextmanager
def serving(upstream: MessageUpstream) -> Iterator[str]:
    """The fake on loopback; yields the base URL clients use (`…/v1`)."""
    with serve_in_thread(upstream.app()) as url:
        yield f"{url}/v1"
