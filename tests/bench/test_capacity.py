"""The capacity bench's pieces (bench/capacity/) at a tiny size: each phase's processes start,
talk to each other and report figures of the right shape. What the figures are is the bench's
business (it prints them); nothing here depends on how fast anything ran."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from capacity import kept_alive, open_streams  # noqa: E402
from capacity.open_streams import Case, Variant  # noqa: E402
from capacity.rate import KINDS, Load, step  # noqa: E402
from perf.servers import Target, start_streamfix, wait_ready  # noqa: E402
from perf_procs import HOST, free_port, start, stop  # noqa: E402


def test_twenty_streams_at_once_through_the_proxy(tmp_path: Path) -> None:
    case = Case(20, 0.0, events=3, gap_ms=100)
    found = open_streams.run_case(case, Variant("streamfix", {}, {}), tmp_path)
    assert found["errors"] == {}
    assert found["opened"] == found["finished"] == 20
    assert found["events"] == 60  # every stamp of every stream read once
    assert found["events_short"] == 0
    lag = found["lag"]
    assert 0 <= lag["p50"] <= lag["p99"] <= lag["max"]  # read after written, on one clock
    assert found["rss_peak"] >= found["rss_idle"] > 0
    assert found["cpu_seconds"] > 0
    # The probe inside the proxy reported (once a second), per generation.
    assert found["gc"]["probe_reports"] > 0
    assert len(found["gc"]["collections"]) == 3
    assert "--config" in found["command"]


def test_what_a_hundred_open_streams_keep_alive() -> None:
    found = kept_alive.run(100)
    assert found["open_at_snapshot"] == 100
    assert found["tracked_after"] > found["tracked_before"]
    assert found["tracked_per_stream"] > 0
    assert found["tasks_per_stream"] >= 1  # each open stream is at least its ASGI task
    kinds = dict(found["types_per_stream"])
    assert "coroutine" in kinds
    heap = found["allocations"]
    assert heap["bytes_per_stream"] > 0
    assert heap["top"] and all(":" in line["where"] for line in heap["top"])
    # The clients left mid-stream: the streams left no reference cycle behind (the frozen heap
    # of proxy/server/gc_tuning.py relies on it). A few dozen objects of garbage come from the
    # process whatever the number of streams; a cycle per stream would be 100 or more.
    assert 0 <= found["cyclic_garbage_per_stream"] < 1
    lines = kept_alive.lines(found)
    assert lines[0].startswith("objects: 100 open streams")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_open_loop_load_through_the_proxy(tmp_path: Path, kind: str) -> None:
    fake_port = free_port()
    processes = [
        start(
            [sys.executable, str(BENCH / "perf_fake.py"), "--port", str(fake_port)],
            tmp_path / "fake.log",
        )
    ]
    try:
        wait_ready(Target("fake", fake_port, processes[0], "/health"), 20)
        proxy = start_streamfix(
            "streamfix", free_port(), f"http://{HOST}:{fake_port}/v1", {}, tmp_path
        )
        processes.append(proxy.process)
        wait_ready(proxy, 30)
        load = Load()
        processes.append(load.process)
        model, stream = KINDS[kind]
        answer = step(load, proxy, model, stream, 40, quick=True)
    finally:
        for process in reversed(processes):
            stop(process)
    assert answer["errors"] == {}
    assert answer["due"] == answer["done"] == 40  # one second measured, after the warm-up
    assert 0 < answer["p50"] <= answer["p99"] <= answer["max"]
    assert not math.isnan(answer["cpu_per_request"])
