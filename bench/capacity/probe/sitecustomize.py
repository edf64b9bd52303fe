"""A bench-only probe in the proxy process: the collector's pauses, and on request what is alive.

The capacity bench puts this directory first on the proxy's PYTHONPATH, so Python imports it at
start-up (`site` imports `sitecustomize`); the proxy's code knows nothing of it. It does
nothing unless CAPACITY_PROBE_DIR names a directory:

- every collection's generation, duration and objects collected are kept (`gc.callbacks`), and
  a thread appends them to `<dir>/gc-<pid>.jsonl` once a second, with `gc.get_count()`;
- SIGUSR1 writes `<dir>/objects-<pid>-<n>.json`: after a `gc.collect()`, the count of live
  objects the collector tracks (frozen ones too), by type, the number of tasks, and what that
  collection freed (`collected`: cyclic garbage); with CAPACITY_TRACEMALLOC=N (frames; tracing
  from start-up) also the tracemalloc snapshot as `<dir>/heap-<pid>-<n>.bin`;
- CAPACITY_GC_DISABLE=1 turns the collector off (to compare with it on);
- CAPACITY_GC_SAVEALL=1 keeps cyclic garbage for the next dump to name by type (`garbage`).
"""

from __future__ import annotations

import os

_DIR = os.environ.get("CAPACITY_PROBE_DIR")


def _name(obj: object) -> str:
    kind = type(obj)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


def _install(directory: str) -> None:
    import gc
    import json
    import signal
    import sys
    import threading
    import time
    import tracemalloc

    frames = int(os.environ.get("CAPACITY_TRACEMALLOC", "0") or 0)
    if frames:
        tracemalloc.start(frames)
    if os.environ.get("CAPACITY_GC_DISABLE") == "1":
        gc.disable()
    if os.environ.get("CAPACITY_GC_SAVEALL") == "1":
        gc.set_debug(gc.DEBUG_SAVEALL)  # cyclic garbage kept in gc.garbage, to see what it is
    pauses: list[tuple[float, int, float, int]] = []
    began = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.append(
                (
                    time.monotonic(),
                    info["generation"],
                    time.perf_counter() - began[0],
                    info["collected"],
                )
            )

    gc.callbacks.append(on_gc)
    if os.environ.get("CAPACITY_EXPERIMENT") == "freeze-gen1":

        def freeze(phase: str, info: dict) -> None:
            if phase == "stop" and info["generation"] >= 1:
                gc.freeze()

        gc.callbacks.append(freeze)

    def flush() -> None:
        path = os.path.join(directory, f"gc-{os.getpid()}.jsonl")
        while True:
            time.sleep(1.0)
            taken = pauses[:]
            del pauses[: len(taken)]
            line = {"t": time.monotonic(), "count": gc.get_count(), "pauses": taken}
            with open(path, "a") as out:
                out.write(json.dumps(line) + "\n")

    threading.Thread(target=flush, name="capacity-probe", daemon=True).start()
    dumps = [0]

    def dump(signum: int, frame: object) -> None:
        dumps[0] += 1
        number = dumps[0]
        # The proxy may keep long-lived objects frozen (server.gc_freeze): hand them back to
        # the collector to count them (and the cycles among them), and freeze them again after.
        frozen = gc.get_freeze_count() > 0
        gc.unfreeze()
        collected = gc.collect()
        gc.unfreeze()  # the proxy's hook froze the survivors of that collection
        garbage: dict[str, int] = {}
        for obj in gc.garbage:
            garbage[_name(obj)] = garbage.get(_name(obj), 0) + 1
        gc.garbage.clear()
        counts: dict[str, int] = {}
        for obj in gc.get_objects():
            key = _name(obj)
            counts[key] = counts.get(key, 0) + 1
        tasks = 0
        asyncio = sys.modules.get("asyncio")
        if asyncio is not None:
            try:
                loop = asyncio.get_running_loop()
                tasks = len(asyncio.all_tasks(loop))
            except RuntimeError:
                tasks = -1
        base = os.path.join(directory, f"{{}}-{os.getpid()}-{number}")
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(base.format("heap") + ".bin")
        if frozen:
            gc.freeze()
        with open(base.format("objects") + ".json", "w") as out:
            json.dump(
                {
                    "collected": collected,
                    "garbage": garbage,
                    "tracked": sum(counts.values()),
                    "types": counts,
                    "tasks": tasks,
                },
                out,
            )

    signal.signal(signal.SIGUSR1, dump)


if _DIR:
    _install(_DIR)
