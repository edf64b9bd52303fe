"""Process-wide counters of what the repairs did, summed from each exchange."""

from __future__ import annotations

from collections import Counter


class Metrics:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def record(self, exchange_counts: Counter[str]) -> None:
        self.counts.update(exchange_counts)
