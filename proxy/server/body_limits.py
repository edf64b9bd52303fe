"""How long a client may take over its request body, and how many body bytes may wait at once.

`proxy.server.chat_request.read_body` applies them:

- a pause of more than `server.body_timeout_seconds` between two pieces of a body, or a body
  not whole after `server.body_total_timeout_seconds` (a drip of a byte every 29 s never trips
  the first), gets 408;
- bodies being received hold at most `server.max_buffered_request_bytes` between them, over
  every connection the app serves (one app per process): the body that would pass it gets 503,
  so unfinished uploads cannot pin memory without bound. A body's bytes count from arrival
  until `read_body` returns or fails; what the handler does with them afterwards is bounded by
  the number of requests in progress, not by slow clients.

Both answers close the connection: the rest of the body will never be read, so the connection
could not carry another request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import Response

from proxy.server.errors import ClientError


class BodyBudget:
    """Bytes of request bodies received and not yet handed over, across connections."""

    def __init__(self) -> None:
        self.held = 0

    def check_room(self, size: int, limit: int) -> None:
        """503 now if `size` more bytes would not fit (a declared Content-Length)."""
        if self.held + size > limit:
            raise server_busy(limit)

    def take(self, size: int, limit: int) -> None:
        """Count `size` bytes, or 503 without counting them if they would pass `limit`."""
        if self.held + size > limit:
            raise server_busy(limit)
        self.held += size

    def give_back(self, size: int) -> None:
        self.held -= size


class BodyDeadline:
    """The two deadlines of one body read on one timer, which cancels the reading task when
    the client paused too long or the whole body is late.

    Why not `asyncio.timeout_at` moved on after each piece, as before: entering, moving and
    leaving it cost 6.4 µs a request, most of a body read that takes under 4 µs itself. Here a
    piece only notes its time; the timer, when it fires early, re-arms itself for the moved
    deadline. Cancellation is told apart as asyncio.timeout does: the task's own cancel count,
    so a cancellation from outside (a shutdown) is never taken for a timeout."""

    def __init__(self, pause: float, total: float) -> None:
        loop = self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancelling = task.cancelling()
        self.pause = pause
        self.total = total
        self._last = loop.time()
        self._whole_by = self._last + total
        self.expired_whole: bool | None = None
        """None until it fired; then whether it was the whole-body deadline."""
        self._timer = loop.call_at(self._due(), self._fire)

    def piece(self) -> None:
        """A piece arrived: the pause is measured from now."""
        self._last = self._loop.time()

    def timed_out(self) -> bool:
        """Called on CancelledError: whether it was this deadline's (it is then consumed)."""
        return self.expired_whole is not None and self._task.uncancel() <= self._cancelling

    def cancel(self) -> None:
        self._timer.cancel()

    def _due(self) -> float:
        return min(self._last + self.pause, self._whole_by)

    def _fire(self) -> None:
        due = self._due()
        if self._loop.time() < due:  # a piece came since it was armed
            self._timer = self._loop.call_at(due, self._fire)
            return
        self.expired_whole = due == self._whole_by
        self._task.cancel()


class ClosingClientError(ClientError):
    """A refusal in the middle of a body: the answer says the connection closes after it."""

    def __init__(self, *args: Any, retry_after: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after

    def response(self) -> Response:
        response = super().response()
        response.headers["connection"] = "close"
        if self.retry_after:
            response.headers["retry-after"] = self.retry_after
        return response


def body_timed_out(waited: float, whole: bool) -> ClientError:
    what = "the request body was not complete after" if whole else "no request body bytes for"
    return ClosingClientError(408, f"{what} {waited:g} s", "request_timeout")


def server_busy(limit: int) -> ClientError:
    return ClosingClientError(
        503,
        f"streamfix is receiving too many request bodies at once (budget {limit} bytes); "
        "retry later",
        "server_busy",
        "server_error",
        retry_after="1",
    )
