"""The ASGI application object: the chat route straight to its handler, the rest via Starlette."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from proxy.server.delivery import REPAIRS_HEADER
from proxy.server.errors import error_response
from proxy.server.paths import decoded, normalised

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
HOT_PATH = "/v1/chat/completions"


class StreamfixApp(Starlette):
    """Starlette with one shortcut: `POST /v1/chat/completions`, nearly every request the proxy
    sees, skips the router and the two exception middlewares (about a tenth of the proxy's own
    time per request in a profile). Every other path and the lifespan go through Starlette."""

    def __init__(self, hot_handler: Handler, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hot_handler = hot_handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = _normalised(scope)
            if scope["path"] == HOT_PATH and scope["method"] == "POST":
                scope["app"] = self
                await self._hot(scope, receive, send)
                return
            send = _with_repairs_header(send)
        await super().__call__(scope, receive, send)

    async def _hot(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await self._hot_handler(Request(scope, receive))
        except ClientDisconnect:
            return  # the client left while sending its request: nobody to answer, nothing sent
        except Exception:
            # A bug of ours, before any byte went out: the client still gets OpenAI's format.
            logger.exception("unexpected error while handling %s", HOT_PATH)
            response = error_response(
                500, "streamfix failed to handle the request", "server_error", "internal_error"
            )
            response.raw_headers.append((REPAIRS_HEADER, b"none"))
        await response(scope, receive, send)


def _with_repairs_header(send: Send) -> Send:
    """Every response says what the proxy changed: the exchanges say it themselves, and the
    rest (health, metrics, a 404) changed nothing."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = message.get("headers") or []
            if not any(name.lower() == REPAIRS_HEADER for name, _ in headers):
                message = {**message, "headers": [*headers, (REPAIRS_HEADER, b"none")]}
        await send(message)

    return sending


def _normalised(scope: Scope) -> Scope:
    """Normalise the path once, before any routing: every spelling of a route (`//`, a trailing
    slash) reaches the same handler, and what is forwarded is what was routed."""
    raw_path = scope.get("raw_path")
    if raw_path is None:
        raw_path = scope["path"].encode()
    normal = normalised(raw_path)
    if normal is raw_path:
        return scope  # the common case: nothing to change, nothing copied
    return {**scope, "raw_path": normal, "path": decoded(normal)}


async def internal_error(request: Request, exc: Exception) -> Response:
    """Starlette's last resort on every other route: OpenAI's format, not a text page."""
    logger.exception("unexpected error while handling %s", request.url.path)
    return error_response(
        500, "streamfix failed to handle the request", "server_error", "internal_error"
    )


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 and 405 (no such route, wrong method), in OpenAI's format."""
    status = getattr(exc, "status_code", 500)
    codes = {404: "not_found", 405: "method_not_allowed"}
    response = error_response(
        status, str(getattr(exc, "detail", "")), "invalid_request_error", codes.get(status, "")
    )
    response.headers.update(getattr(exc, "headers", None) or {})  # a 405's Allow
    return response
