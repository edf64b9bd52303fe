"""Reading and checking a client's request body before anything goes upstream."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from proxy import json_codec
from proxy.errors import ClientError


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise _too_large(limit)
        parts.append(part)
    return b"".join(parts)


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
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return None
    return body.get("model") if isinstance(body, dict) else None
