"""What one request/response exchange knows about itself, shared by its repairs.

What only the server keeps (the client's method and path, timings, the span, the debug flag,
the recorder's copy) is its record (proxy/server/record.py), not the repairs'."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from proxy.repair.rules import RouteRules
from proxy.repair.tenancy import ReceiptScope

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Exchange:
    request_id: str
    request: dict[str, Any] = field(default_factory=dict)
    """The chat-completion request body as forwarded upstream."""
    rules: RouteRules = field(default_factory=RouteRules)
    """What the route's upstream needs and allows, resolved once per route and profile
    (`UpstreamRoute.rules`), with what its upstream refused before (upstream/refusals.py)."""
    scope: ReceiptScope = field(default_factory=lambda: ReceiptScope(None, "none"))
    """No tenant unless the request showed a credential: no receipts kept or given."""
    repairs: Counter[str] = field(default_factory=Counter)
    """Repairs applied and anomalies seen, by kind; summed into metrics and the log line."""

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
