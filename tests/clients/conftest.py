"""Fixtures for the real-client tests, and the real-client matrix printed after a run.

Session-scoped, so every client test shares one fake upstream and one proxy per emit mode,
each under a real uvicorn on loopback:

    fake_upstream      (FakeUpstream, root URL) replaying tests/transcripts/
    upstream_base_url  "<fake root>/v1", what a client uses to skip the proxy
    auto_proxy         "<proxy>/v1", strict repairs, default emit (auto)
    atomic_proxy       "<proxy>/v1", strict repairs, tool_calls.emit = "atomic"
    incremental_proxy  "<proxy>/v1", strict repairs, tool_calls.emit = "incremental"
    node_clients       runs `npm ci` once when node_modules is not current

The matrix: a test marked `client_matrix(table=..., row=..., column=...)` fills one cell of
`table` with its outcome (pass / FAIL / skip); `pytest_terminal_summary` prints every table
that had at least one test run, rows and columns in collection order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.clients.vercel import ensure_node_modules
from tests.support.fake_upstream import FakeUpstream, running_fake_upstream
from tests.support.servers import serve_in_thread

# ── fixtures ─────────────────────────────────────────────────────────────────


@pytest.fixture(scope="session")
def fake_upstream() -> Iterator[tuple[FakeUpstream, str]]:
    with running_fake_upstream() as pair:
        yield pair


@pytest.fixture(scope="session")
def upstream_base_url(fake_upstream: tuple[FakeUpstream, str]) -> str:
    return f"{fake_upstream[1]}/v1"


def _serve_proxy(upstream_base_url: str, **values: Any) -> Iterator[str]:
    settings = Settings().with_values(
        {"upstream.base_url": upstream_base_url, "repairs.strict": True, **values}
    )
    with serve_in_thread(create_app(settings)) as url:
        yield f"{url}/v1"


@pytest.fixture(scope="session")
def auto_proxy(upstream_base_url: str) -> Iterator[str]:
    assert Settings().tool_calls.emit == "auto", "the default emit mode changed"
    yield from _serve_proxy(upstream_base_url)


@pytest.fixture(scope="session")
def atomic_proxy(upstream_base_url: str) -> Iterator[str]:
    yield from _serve_proxy(upstream_base_url, **{"tool_calls.emit": "atomic"})


@pytest.fixture(scope="session")
def incremental_proxy(upstream_base_url: str) -> Iterator[str]:
    yield from _serve_proxy(upstream_base_url, **{"tool_calls.emit": "incremental"})


@pytest.fixture(scope="session")
def node_clients() -> None:
    ensure_node_modules()


# ── the real-client matrix ───────────────────────────────────────────────────

_MATRIX_PROPERTY = "client_matrix"


@dataclass
class _Table:
    rows: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    seconds: float = 0.0


# title -> table, in order of first collection; filled from the test reports.
_TABLES: dict[str, _Table] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "client_matrix(table, row, column): the test's outcome is one cell of the real-client "
        "matrix printed at the end of the run",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("client_matrix")
        if marker is None:
            continue
        cell = (marker.kwargs["table"], marker.kwargs["row"], marker.kwargs["column"])
        # user_properties travel with every report (also across pytest-xdist workers).
        item.user_properties.append((_MATRIX_PROPERTY, cell))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    cell = next((value for key, value in report.user_properties if key == _MATRIX_PROPERTY), None)
    if cell is None:
        return
    title, row, column = cell
    table = _TABLES.setdefault(title, _Table())
    if row not in table.rows:
        table.rows.append(row)
    if column not in table.columns:
        table.columns.append(column)
    table.seconds += report.duration
    previous = table.cells.get((row, column))
    if report.failed:
        outcome = "FAIL"
    elif report.skipped:
        outcome = "skip"
    elif report.when == "call":
        outcome = "pass"
    else:
        return  # a passing setup or teardown says nothing on its own
    if previous != "FAIL":  # a failing teardown after a passing call still fails the cell
        table.cells[(row, column)] = outcome


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for title, table in _TABLES.items():
        if not table.cells:
            continue
        terminalreporter.write_sep("=", "real-client matrix")
        for line in title.splitlines():
            terminalreporter.write_line(line)
        for line in _render(table):
            terminalreporter.write_line(line)
        counts = {o: list(table.cells.values()).count(o) for o in ("pass", "FAIL", "skip")}
        terminalreporter.write_line(
            f"{counts['pass']} pass, {counts['FAIL']} FAIL, {counts['skip']} skip; "
            f"{table.seconds:.1f} s in these tests"
        )


def _render(table: _Table) -> list[str]:
    header = ["transcript", *table.columns]
    body = [
        [row, *(table.cells.get((row, column), "-") for column in table.columns)]
        for row in table.rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return [
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *body]
    ]
