"""What one request/response exchange knows about itself, shared by its repairs."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.repair.rules import RouteRules
from proxy.repair.tenancy import ReceiptScope

logger = logging.getLogger(__name__)


class ClientCopy(Protocol):
    """A copy of what the client is sent, kept by someone outside the repairs (a recording
    transport's cassette writer): delivery hands it every byte, then saves it once."""

    def sent(self, data: bytes) -> None: ...

    async def save(self) -> None:
        """The exchange is over, however it ended. Whatever it needs to keep is taken before
        its first await, so a cancellation landing there loses nothing."""


@dataclass(slots=True)
class Exchange:
    request_id: str
    request: dict[str, Any] = field(default_factory=dict)
    """The chat-completion request body as forwarded upstream."""
    route: str = "default"
    method: str = "POST"
    path: str = "/v1/chat/completions"
    """The client's method and (normalised) path, so a log line tells a chat from `/v1/models`."""
    rules: RouteRules = field(default_factory=RouteRules)
    """What the route's upstream needs and allows, resolved once per route and profile
    (`UpstreamRoute.rules`); its learned parameters are this request's."""
    scope: ReceiptScope = field(default_factory=lambda: ReceiptScope(None, "none"))
    """No tenant unless the request showed a credential: no receipts kept or given."""
    started: float = field(default_factory=time.monotonic)
    repairs: Counter[str] = field(default_factory=Counter)
    """Repairs applied and anomalies seen, by kind; summed into metrics and the log line."""
    client_copy: ClientCopy | None = None
    """Set by a recording transport when the request goes upstream; delivery fills it."""
    debug: bool = False
    """The client asked (`x-streamfix-debug: 1`) for the stream's repairs in an SSE comment."""
    trace: Any = None
    """The exchange's OpenTelemetry span while it runs, when tracing is on (server/tracing.py)."""

    def count(self, kind: str, amount: int = 1) -> None:
        if amount:
            self.repairs[kind] += amount
            # `--log-level debug` shows each repair as it happens. isEnabledFor is a cached
            # lookup, so at the usual levels this costs the streaming path next to nothing.
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("[%s] %s +%d", self.request_id, kind, amount)

    def summary(self) -> str:
        """The repairs so far as `kind:count,…` in kind order, or `none`: one spelling for the
        log line, the `x-streamfix-repairs` header and the debug comment."""
        return ",".join(f"{kind}:{n}" for kind, n in sorted(self.repairs.items())) or "none"

    def note(self, kind: str, message: str, *args: Any) -> None:
        """Count `kind` and log why, tagged with the request id."""
        self.count(kind)
        logger.warning("[%s] %s: " + message, self.request_id, kind, *args)
