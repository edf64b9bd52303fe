"""How the Responses front refuses a request: OpenAI's error body and status, the parameter
named (`unsupported_parameter` for what cannot be honoured, `invalid_value` for what is
malformed), so a client shows the cause instead of retrying."""

from __future__ import annotations

from typing import Any

from proxy.fronts.translator import Refused


class FrontError(Refused):
    """A request the front refuses: the HTTP status and OpenAI's error body."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message, status, openai_error(message, code, param))


def openai_error(
    message: str, code: str, param: str | None = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    """OpenAI's error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def completed_error(body: Any) -> dict[str, Any] | None:
    """The proxy's own error body (keys, limits, an unreachable upstream: `{"error": {message,
    type, code}}`) with every field of OpenAI's, `param` null; None for any other body."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    return {"error": {"message": "", "type": "server_error", "param": None, "code": None, **error}}


def unsupported(param: str, why: str) -> FrontError:
    return FrontError(400, f"{param}: {why}", "unsupported_parameter", param)


def invalid(param: str, why: str) -> FrontError:
    return FrontError(400, f"{param}: {why}", "invalid_value", param)
