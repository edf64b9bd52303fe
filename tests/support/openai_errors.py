"""What the proxy's own errors look like to a client: OpenAI's error format."""

from __future__ import annotations

from typing import Any

import httpx


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
