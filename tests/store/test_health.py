"""An outage's bookkeeping, on a clock the test moves: a timed-out store is held off for
HOLD_OFF_SECONDS and then probed by one caller at a time; a refused one is tried every time."""

from __future__ import annotations

from proxy.store.health import HOLD_OFF_SECONDS, StoreHealth


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_timeout_holds_the_store_off_then_lets_one_probe_through() -> None:
    clock = Clock()
    health = StoreHealth("redis://r/0", clock)
    health.failed("read", TimeoutError(), timed_out=True)
    assert [health.may_try() for _ in range(3)] == [False, False, False]
    assert health.errors == 4  # the failure and the three skipped
    clock.now += HOLD_OFF_SECONDS
    assert [health.may_try() for _ in range(3)] == [True, False, False]  # one probe
    health.answered()
    assert health.down is False and all(health.may_try() for _ in range(3))
    assert health.outages == 1


def test_a_refused_connection_holds_nothing_off() -> None:
    health = StoreHealth("redis://r/0", Clock())
    health.failed("read", ConnectionRefusedError(), timed_out=False)
    assert health.down is True
    assert all(health.may_try() for _ in range(3))
    assert health.errors == 1
