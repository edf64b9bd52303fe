"""Reading and checking a client's request body before anything goes upstream."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request

from proxy.server.body_limits import BodyBudget, BodyDeadline, body_timed_out
from proxy.server.errors import ClientError
from proxy.settings.schema import ServerSettings
from proxy.wire import json_codec


async def read_body(request: Request, server: ServerSettings, budget: BodyBudget) -> bytes:
    """The whole body, refused with 413 as soon as it passes `server.max_request_bytes`, with
    408 when the client stalls, and with 503 when the bodies being received would pass their
    budget (see proxy/server/body_limits.py). Its bytes count against `budget` until this returns or
    raises."""
    limit = server.max_request_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    budget_limit = server.max_buffered_request_bytes
    if declared and declared.isdigit():
        budget.check_room(int(declared), budget_limit)  # refused before the client sends it
    deadline = BodyDeadline(server.body_timeout_seconds, server.body_total_timeout_seconds)
    parts: list[bytes] = []
    size = 0
    held = 0
    try:
        async for part in request.stream():
            if not part:
                continue  # Starlette's end marker
            size += len(part)
            if size > limit:
                raise _too_large(limit)
            budget.take(len(part), budget_limit)
            held += len(part)
            parts.append(part)
            deadline.piece()
        return b"".join(parts)
    except asyncio.CancelledError:
        if not deadline.timed_out():
            raise
        whole = bool(deadline.expired_whole)
        waited = deadline.total if whole else deadline.pause
        raise body_timed_out(waited, whole) from None
    finally:
        deadline.cancel()
        budget.give_back(held)  # on every exit: the body, an error, a disconnect, a cancel


def parse_chat_request(raw: bytes) -> dict[str, Any]:
    """The chat-completion body as an object with a `messages` list, or a 400 that says why."""
    try:
        body = json_codec.loads(raw)
    except json_codec.JSONDecodeError as exc:
        raise ClientError(400, f"request body is not valid JSON: {exc}", "invalid_json") from exc
    if not isinstance(body, dict):
        raise ClientError(400, "request body must be a JSON object", "invalid_request")
    if not isinstance(body.get("messages"), list):
        raise ClientError(400, "'messages' must be a list of messages", "invalid_request")
    return body


def _too_large(limit: int) -> ClientError:
    return ClientError(413, f"request body exceeds {limit} bytes", "request_too_large")


def model_of(raw: bytes) -> Any:
    """The `model` of any JSON body (other /v1/ paths route by it too), None when there is none."""
    try:
        body = json_codec.loads(raw) if raw else None
    except json_codec.JSONDecodeError:
        return None
    return body.get("model") if isinstance(body, dict) else None
