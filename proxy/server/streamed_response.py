"""A streamed response sent straight to the ASGI server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.server.keepalive import Keepalive


class StreamedResponse(Response):
    """Like Starlette's StreamingResponse, but it notices the client leaving with one task.

    uvicorn speaks ASGI 2.3, where sending to a departed client raises nothing, so the disconnect
    has to be read from `receive`. Starlette does that with a task group of two tasks and cancel
    scopes for every stream; here one task waits for `http.disconnect` and, if the stream is still
    running, cancels it, which closes the body iterator and with it the upstream response.
    With a `keepalive`, a comment goes out in each of the stream's silences (keepalive.py).
    """

    def __init__(
        self,
        content: AsyncIterator[bytes],
        status_code: int = 200,
        headers: Mapping[str, str] | Sequence[tuple[bytes, bytes]] | None = None,
        media_type: str | None = None,
        keepalive: Keepalive | None = None,
    ) -> None:
        self.body_iterator = content
        self.keepalive = keepalive
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        if headers is None or isinstance(headers, Mapping):
            self.init_headers(headers)
        else:
            # Fields as the upstream sent them, one line each (two Set-Cookies stay two).
            self.raw_headers = with_content_type(list(headers), media_type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        finished = False
        left = False

        def on_disconnect(watch: asyncio.Future[None]) -> None:
            nonlocal left
            if not finished and not watch.cancelled() and watch.exception() is None:
                left = True
                task.cancel()

        watch = asyncio.ensure_future(_until_disconnect(receive))
        watch.add_done_callback(on_disconnect)
        body = self.body_iterator
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            if self.keepalive is None:
                async for chunk in body:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            else:
                await self.keepalive.relay(body, send)
            finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not left:
                raise  # a shutdown, not the client: let it through
            task.uncancel()  # the client left; the body's own cleanup has run below
        finally:
            finished = True
            watch.cancel()
            aclose = getattr(body, "aclose", None)
            if aclose is not None:
                await aclose()  # cancelled mid-send, the generator still holds the upstream


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def with_content_type(
    raw_headers: list[tuple[bytes, bytes]], media_type: str | None
) -> list[tuple[bytes, bytes]]:
    if media_type is not None and not any(n.lower() == b"content-type" for n, _ in raw_headers):
        raw_headers.append((b"content-type", media_type.encode("latin-1")))
    return raw_headers
