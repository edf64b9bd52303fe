"""What the server keeps about one exchange while it runs: how it came in, when, its span, and
what a recorder wants a copy of. The repairs never see it; they count on their own `Exchange`,
which the record points to for the counts its log line and metrics give."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from proxy.repair.exchange import Exchange
from proxy.upstream.context import ClientCopy


@dataclass(slots=True)
class ExchangeRecord:
    exchange: Exchange
    """The repairs' view of the exchange: its request id, request, profile and counts."""
    route: str = "default"
    method: str = "POST"
    path: str = "/v1/chat/completions"
    """The client's method and (normalised) path, so a log line tells a chat from `/v1/models`."""
    started: float = field(default_factory=time.monotonic)
    debug: bool = False
    """The client asked (`x-streamfix-debug: 1`) for the stream's repairs in an SSE comment."""
    trace: Any = None
    """The exchange's OpenTelemetry span while it runs, when tracing is on (server/tracing.py)."""
    client_copy: ClientCopy | None = None
    """What a recording transport handed back with the response (upstream/context.py
    `CLIENT_COPY`); delivery gives it every byte the client is sent, then saves it."""

    @property
    def request_id(self) -> str:
        return self.exchange.request_id

    def note(self, kind: str, message: str, *args: Any) -> None:
        self.exchange.note(kind, message, *args)
