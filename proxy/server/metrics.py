"""Prometheus metrics, one registry per app. Labels carry only route names, status codes and
fixed kinds from the code, and the token metrics' model names, bounded per route
(token_metrics.py): never a credential or free-form text."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from proxy.repair.answer_facts import AnswerFacts
from proxy.server.token_metrics import TokenMetrics

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
        # A counter fed from the store's own count at each scrape: `rate()` shows an outage
        # while it lasts.
        self.store_errors = Counter(
            "streamfix_store_errors",
            "Receipt store operations not served (failed, or skipped during an outage)",
            registry=registry,
        )
        self.token_usage = TokenMetrics(registry)
        self.store_up = Gauge(
            "streamfix_store_up",
            "1 while the receipt store answers, 0 during an outage (requests still go on)",
            registry=registry,
        )
        self.store_up.set(1)
        self._store_errors_seen = 0
        # Each exchange's children by their labels, looked up once: `labels()` takes a lock and
        # checks the names on every call, a few µs per exchange for children that never change.
        # Bounded: routes, status codes and repair kinds are fixed sets of the code and config.
        self._children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}
        self._counters: dict[tuple[str, str], tuple[Counter, ...]] = {}
        self._first_bytes: dict[str, Histogram] = {}

    def store_state(self, up: bool, errors: int) -> None:
        """The store as last seen: whether it answers, and its count of operations not served."""
        self.store_up.set(1 if up else 0)
        if errors > self._store_errors_seen:
            self.store_errors.inc(errors - self._store_errors_seen)
            self._store_errors_seen = errors

    def first_byte(self, route: str, seconds: float) -> None:
        """The upstream's time to its response head, on the route's child looked up once."""
        child = self._first_bytes.get(route)
        if child is None:
            child = self._first_bytes[route] = self.time_to_first_byte.labels(route)
        child.observe(seconds)

    def record(self, route: str, status: int, duration: float, counts: Tally[str]) -> None:
        children = self._children.get((route, status))
        if children is None:
            children = self._children[(route, status)] = (
                self.requests.labels(route, str(status)),
                self.duration.labels(route),
            )
        requests, durations = children
        requests.inc()
        durations.observe(duration)
        for kind, amount in counts.items():
            counters = self._counters.get((kind, route))
            if counters is None:
                counters = self._counters[(kind, route)] = self._repair_counters(kind, route)
            for counter in counters:
                counter.inc(amount)

    def tokens(self, route: str, provider: str, requested: object, answer: AnswerFacts) -> None:
        """The usage an exchange's upstream reported (token_metrics.py)."""
        self.token_usage.count(route, provider, requested, answer)

    def _repair_counters(self, kind: str, route: str) -> tuple[Counter, ...]:
        repairs = self.repairs.labels(kind, route)
        event = SIGNATURE_EVENTS.get(kind)
        return (repairs, self.signatures.labels(event)) if event else (repairs,)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
