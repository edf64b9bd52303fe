"""bench/perf's Portkey peer: the fixes its install step applies to the gateway's build, and
the routing headers the load generator sends to that one target."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import perf_load  # noqa: E402
from perf.config import Failed  # noqa: E402
from perf.portkey import FIXES, apply_fixes, routing_headers  # noqa: E402

BUILD = "before;" + ";".join(original for _, original, _ in FIXES) + ";after"
"""A stand-in for the gateway's start-server.js: each fix's original once, between other code."""


def test_each_fix_replaces_its_original_once_and_nothing_else(tmp_path: Path) -> None:
    script = tmp_path / "start-server.js"
    script.write_text(BUILD)
    apply_fixes(script)
    fixed = script.read_text()
    assert fixed == "before;" + ";".join(new for _, _, new in FIXES) + ";after"
    apply_fixes(script)  # a second install run finds them applied and leaves the file alone
    assert script.read_text() == fixed


@pytest.mark.parametrize("times", [0, 2])
def test_a_build_without_exactly_one_original_fails_the_install(tmp_path: Path, times: int) -> None:
    _, original, _ = FIXES[0]
    script = tmp_path / "start-server.js"
    script.write_text(BUILD.replace(original, "").replace("after", original * times))
    with pytest.raises(Failed, match=f"occurs {times} times"):
        apply_fixes(script)


def test_the_routing_headers_go_only_to_the_port_they_were_given_for() -> None:
    headers = routing_headers(8123)
    assert headers == {
        "x-portkey-provider": "openai",
        "x-portkey-custom-host": "http://127.0.0.1:8123/v1",
    }
    perf_load.ROUTES.clear()
    try:
        asyncio.run(perf_load.route({"job": "route", "port": 9001, "headers": headers}))
        routed = perf_load.request_bytes(9001, "perf-json", False)
        plain = perf_load.request_bytes(9002, "perf-json", False)
    finally:
        perf_load.ROUTES.clear()
    head, _, body = routed.partition(b"\r\n\r\n")
    assert b"\r\nx-portkey-provider: openai\r\n" in head + b"\r\n"
    assert b"\r\nx-portkey-custom-host: http://127.0.0.1:8123/v1" in head
    assert b"x-portkey" not in plain
    assert body == plain.partition(b"\r\n\r\n")[2]
