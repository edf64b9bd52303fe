"""What one request/response exchange knows about itself, shared by its repairs."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from proxy.repair.profiles import PROFILES, ProviderProfile
from proxy.repair.tenancy import ReceiptScope

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Exchange:
    request_id: str
    request: dict[str, Any] = field(default_factory=dict)
    """The chat-completion request body as forwarded upstream."""
    route: str = "default"
    profile: ProviderProfile = PROFILES["generic"]
    """What the upstream of this request needs, decided once, before the stream starts."""
    scope: ReceiptScope = field(default_factory=lambda: ReceiptScope(None, "none"))
    """No tenant unless the request showed a credential: no receipts kept or given."""
    started: float = field(default_factory=time.monotonic)
    repairs: Counter[str] = field(default_factory=Counter)
    """Repairs applied and anomalies seen, by kind; summed into metrics and the log line."""

    def count(self, kind: str, amount: int = 1) -> None:
        if amount:
            self.repairs[kind] += amount

    def note(self, kind: str, message: str, *args: Any) -> None:
        """Count `kind` and log why, tagged with the request id."""
        self.count(kind)
        logger.warning("[%s] %s: " + message, self.request_id, kind, *args)
