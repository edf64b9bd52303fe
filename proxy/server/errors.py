"""Errors the proxy itself raises, in OpenAI's error format."""

from __future__ import annotations

from starlette.responses import Response

from proxy.wire import json_codec
from proxy.wire.sse import encode


def error_body(message: str, type_: str, code: str) -> dict[str, dict[str, str]]:
    return {"error": {"message": message, "type": type_, "code": code}}


def error_response(status: int, message: str, type_: str, code: str) -> Response:
    return Response(
        json_codec.dumps(error_body(message, type_, code)),
        status_code=status,
        media_type="application/json",
    )


def error_event(message: str, type_: str, code: str) -> bytes:
    """A final SSE event telling a streaming client that the answer is incomplete."""
    return encode(error_body(message, type_, code))


class ClientError(Exception):
    """A request the proxy refuses before anything is sent upstream."""

    def __init__(
        self, status: int, message: str, code: str, type_: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type_

    def response(self) -> Response:
        return error_response(self.status, self.message, self.type, self.code)
