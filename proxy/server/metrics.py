"""Prometheus metrics, one registry per app. Labels carry only route names, status codes and
fixed kinds from the code: never a credential or free-form text."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Google's signature events are also counted by event in `streamfix_signatures`, the metric
# they had before every receipt kind was counted alike in `streamfix_repairs`.
SIGNATURE_EVENTS = {
    "signatures_captured": "captured",
    "signatures_injected": "injected",
    "signatures_placeholders": "placeholder",
}
_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.requests = Counter(
            "streamfix_requests",
            "Exchanges by route and status",
            ["route", "status"],
            registry=registry,
        )
        self.repairs = Counter(
            "streamfix_repairs",
            "Repairs applied and anomalies seen, by kind and route",
            ["kind", "route"],
            registry=registry,
        )
        self.signatures = Counter(
            "streamfix_signatures",
            "Google's thought signatures by event (also in streamfix_repairs)",
            ["event"],
            registry=registry,
        )
        self.active_streams = Gauge(
            "streamfix_active_streams", "Streams being sent to clients", registry=registry
        )
        self.time_to_first_byte = Histogram(
            "streamfix_upstream_ttfb_seconds",
            "Upstream time to response headers",
            ["route"],
            buckets=_SECONDS,
            registry=registry,
        )
        self.duration = Histogram(
            "streamfix_upstream_duration_seconds",
            "Exchange duration until the last byte reached the client",
            ["route"],
            buckets=_SECONDS,
            registry=registry,
        )
        self.store_errors = Gauge(
            "streamfix_store_errors", "Receipt store operations that failed", registry=registry
        )

    def record(self, route: str, status: int, duration: float, counts: Tally[str]) -> None:
        self.requests.labels(route, str(status)).inc()
        self.duration.labels(route).observe(duration)
        for kind, amount in counts.items():
            self.repairs.labels(kind, route).inc(amount)
            if event := SIGNATURE_EVENTS.get(kind):
                self.signatures.labels(event).inc(amount)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
