"""How the Messages front refuses a request: Anthropic's error body
(`{"type": "error", "error": {"type": …, "message": …}}`) with the status that picks the
client's exception class."""

from __future__ import annotations

from typing import Any

from proxy.fronts.translator import Refused

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status (its SDKs pick their exception class by the
    status, Claude Code shows the type)."""
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


class MessagesError(Refused):
    """A request the Messages front refuses, with the status and body Anthropic would send."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message, status, error_body(status, message))


def string_at(value: Any, where: str) -> str:
    """A field that must be a string; the request is refused naming where it is otherwise."""
    if not isinstance(value, str):
        raise MessagesError(f"{where}: must be a string")
    return value
