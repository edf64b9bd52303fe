"""The collector kept off long-lived objects (proxy/server/gc_tuning.py), and the proxy running
with it: what survives a middle-generation collection is frozen, a frozen cycle is reclaimed by
the full collection of everything, and the proxy's lifespan installs and removes the policy.

The collector is process-wide, and a suite runs many apps in one process (a server thread still
shutting down holds the policy): each test runs in a fresh interpreter of its own."""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import subprocess
import sys
import weakref
from collections.abc import Callable

import httpx

from proxy.server import gc_tuning
from proxy.server.gc_tuning import FrozenHeap
from tests.support.proxies import running_proxy

ISOLATED = "STREAMFIX_GC_TEST_ISOLATED"


def isolated(test: Callable[[], None]) -> Callable[[], None]:
    """Run `test` alone in a fresh interpreter (pytest on this one test), or, in it, run it."""

    @functools.wraps(test)
    def run() -> None:
        if os.environ.get(ISOLATED) == "1":
            test()
            return
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        done = subprocess.run(
            [*command, f"{__file__}::{test.__name__}"],
            env={**os.environ, ISOLATED: "1"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    return run


class Node:
    """A container the collector tracks, and that can be part of a cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(b)


@isolated
def test_survivors_of_a_middle_generation_collection_are_frozen_until_it_stops() -> None:
    async def main() -> None:
        heap = FrozenHeap.start()
        try:
            assert gc_tuning._freeze_survivors in gc.callbacks
            kept, _ = cycle()
            gc.collect(1)  # kept survives it: frozen right after
            frozen = gc.get_freeze_count()
            assert frozen > 0
            assert not any(obj is kept for obj in gc.get_objects())  # in no generation
        finally:
            heap.stop()
        assert gc_tuning._freeze_survivors not in gc.callbacks
        assert gc.get_freeze_count() == 0  # everything handed back to the collector
        assert any(obj is kept for obj in gc.get_objects())

    asyncio.run(main())


@isolated
def test_a_frozen_cycle_waits_for_the_full_collection_of_everything() -> None:
    async def main() -> None:
        heap = FrozenHeap.start()
        try:
            head, tail = cycle()
            gc.collect(1)
            del head  # now garbage, but frozen: no collection walks it
            gc.collect()
            assert tail() is not None
            heap.check(full_every=0.0, growth=0.0)  # "doubled", and due
            assert tail() is None
        finally:
            heap.stop()

    asyncio.run(main())


@isolated
def test_the_full_collection_waits_for_growth_and_for_its_interval() -> None:
    async def main() -> None:
        heap = FrozenHeap.start()
        try:
            head, tail = cycle()
            gc.collect(1)
            del head
            heap.check()  # the defaults: nothing has doubled, and the interval has not passed
            heap.check(full_every=0.0)  # due, but the process has not doubled
            heap.check(growth=0.0)  # grown, but not due
            assert tail() is not None
        finally:
            heap.stop()
        gc.collect()
        assert tail() is None

    asyncio.run(main())


@isolated
def test_the_proxy_freezes_while_it_serves_and_not_with_gc_freeze_off() -> None:
    installed = []
    for freeze in (True, False):
        with running_proxy("http://127.0.0.1:9/v1", **{"server.gc_freeze": freeze}) as url:
            assert httpx.get(url + "/healthz").status_code == 200
            installed.append(gc_tuning._freeze_survivors in gc.callbacks)
        assert gc_tuning._freeze_survivors not in gc.callbacks
    assert installed == [True, False]
