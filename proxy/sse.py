"""Incremental Server-Sent Events decoding and encoding.

The decoder keeps the exact bytes of every event so that an event no repair touches can be
forwarded as received. Lines end at CR, LF or CRLF only: `str.splitlines()` would also split
on U+2028, which is legal inside a JSON string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from proxy import json_codec
from proxy.limits import LimitExceeded

_LINE_END = re.compile(rb"\r\n|\r|\n")

DONE = b"data: [DONE]\n\n"


class EventTooLarge(LimitExceeded):
    """One SSE event grew past the configured limit before its terminating blank line."""

    code = "event_too_large"


@dataclass(slots=True)
class SSEEvent:
    raw: bytes
    """The event's bytes as received, terminating blank line included."""
    data: str | None = None
    """The `data:` lines joined with LF; None when the event has no data field."""
    event: str | None = None
    """The `event:` field, when present."""


class SSEDecoder:
    """Feed bytes as they arrive; get complete events back."""

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self._max_event_bytes = max_event_bytes
        self._pending = bytearray()  # bytes after the last complete line
        self._raw = bytearray()  # complete lines of the current event
        self._data: list[bytes] = []
        self._event: bytes | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._pending
        # Only the new bytes can hold a line end, plus a CR held back from the last feed: a
        # long line arriving in small pieces costs linear time, not quadratic.
        search_from = max(len(buf) - 1, 0)
        buf += chunk
        events: list[SSEEvent] = []
        pos = 0
        end = len(buf)
        while (match := _LINE_END.search(buf, search_from)) is not None:
            if match.end() == end and match.group() == b"\r":
                break  # a CR at the very end may be the first half of a CRLF
            line = bytes(buf[pos : match.start()])
            self._raw += buf[pos : match.end()]
            pos = search_from = match.end()
            if line:
                self._field(line)
            else:
                events.append(self._dispatch())
        del buf[:pos]
        self._check_size()
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: an unterminated last line or event is still delivered, not lost."""
        if self._pending:
            pending, self._pending = bytes(self._pending), bytearray()
            self._raw += pending
            line = pending.rstrip(b"\r")
            if line:
                self._field(line)
        if self._raw:
            return [self._dispatch()]
        return []

    def _field(self, line: bytes) -> None:
        if line[0] == 0x3A:  # ":" starts a comment
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value

    def _dispatch(self) -> SSEEvent:
        event = SSEEvent(
            raw=bytes(self._raw),
            data=b"\n".join(self._data).decode("utf-8", "replace") if self._data else None,
            event=self._event.decode("utf-8", "replace") if self._event is not None else None,
        )
        self._raw.clear()
        self._data = []
        self._event = None
        return event

    def _check_size(self) -> None:
        limit = self._max_event_bytes
        if limit is not None and len(self._raw) + len(self._pending) > limit:
            raise EventTooLarge(f"an SSE event exceeded {limit} bytes")


def encode(chunk: Any) -> bytes:
    """One `data:` event carrying `chunk` as JSON."""
    return b"data: " + json_codec.dumps(chunk) + b"\n\n"
