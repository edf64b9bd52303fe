"""What the proxy's own errors look like to a client: OpenAI's error format."""

from __future__ import annotations

from typing import Any

import httpx
import orjson


def assert_openai_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == "upstream_error"
    assert error["code"] == code
    return error


def as_chat_clients_get(upstream_body: bytes) -> bytes:
    """An upstream refusal as the chat door relays it: unchanged, but for Google's error object
    wrapped in a one-item array, which reaches the client without the array (its bytes as
    re-encoded, compact)."""
    document = orjson.loads(upstream_body) if upstream_body.lstrip()[:1] == b"[" else None
    if isinstance(document, list) and len(document) == 1 and "error" in document[0]:
        return orjson.dumps(document[0])
    return upstream_body
