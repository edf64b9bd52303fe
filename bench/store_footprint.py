"""How much memory the in-process receipt store holds, and that it stays flat.

Fills a `MemoryStore(max_entries=100_000)` with 100,000 realistic thought-signature receipts
(`tenant:upstream:call:<id>` -> `{"extra_content": {"google": {"thought_signature": …}}}`, the
signature 100-300 base64 characters), then pushes 200,000 more and prints, at each checkpoint,
the entries held and the memory they take:

- Python heap: tracemalloc's current traced bytes, less those traced before the store existed.
- RSS: the process's resident set (VmRSS in /proc/self/status, else ru_maxrss) less its value
  before the store existed.

tracemalloc's own bookkeeping inflates RSS, so each figure comes from its own child process
(`--measure heap` / `--measure rss`); the parent runs both and prints one table. Receipts go
in as the proxy writes them, a few per exchange, with the inputs dropped after each put, so
what is measured is what the store keeps.

    python bench/store_footprint.py [--entries 100000] [--extra 200000] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import random
import resource
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.store.memory_store import MemoryStore

MiB = 1024 * 1024
TENANTS = 50
UPSTREAMS = ("generativelanguage.googleapis.com/v1beta/openai", "127.0.0.1:8000/v1")


def receipts(seed: int) -> Iterator[dict[str, dict]]:
    """Endless exchanges: each a dict of 1-3 receipts, as one put_many at an exchange's end."""
    rng = random.Random(seed)
    tenants = [f"{rng.getrandbits(64):016x}" for _ in range(TENANTS)]
    upstreams = [f"{rng.getrandbits(32):08x}" for _ in UPSTREAMS]
    serial = 0
    while True:
        tenant = rng.choice(tenants)
        upstream = rng.choice(upstreams)
        batch: dict[str, dict] = {}
        for _ in range(rng.choice((1, 1, 1, 2, 3))):  # mostly one call, sometimes parallel
            serial += 1
            style = serial % 3
            if style == 0:
                call_id = f"{rng.getrandbits(40):010x}"[:8]  # 623rbkd0-like
            elif style == 1:
                call_id = f"call_{serial}"
            else:
                call_id = f"function-call-{uuid.UUID(int=rng.getrandbits(128))}"
            raw = rng.randbytes(rng.randint(75, 225))  # 100-300 base64 characters
            signature = base64.b64encode(raw).decode("ascii")
            batch[f"{tenant}:{upstream}:call:{call_id}"] = {
                "extra_content": {"google": {"thought_signature": signature}}
            }
        yield batch


def rss_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


async def measure(kind: str, entries: int, extra: int, seed: int) -> list[dict]:
    """Fill, then push `extra` more; one row per checkpoint with the memory of `kind`."""
    if kind == "heap":
        tracemalloc.start()

    def sample() -> int:
        gc.collect()
        return tracemalloc.get_traced_memory()[0] if kind == "heap" else rss_bytes()

    source = receipts(seed)
    baseline = sample()
    store = MemoryStore(max_entries=entries, ttl_seconds=86_400)
    step = max(1, extra // 4)
    checkpoints = [entries + step * i for i in range(1, 4)] + [entries + extra]
    checkpoints = [entries, *sorted(set(checkpoints))] if extra else [entries]
    rows: list[dict] = []
    puts = 0
    payload = 0
    started = time.perf_counter()
    for target in checkpoints:
        while puts < target:
            batch = next(source)
            for key, value in batch.items():
                payload += len(key) + len(value["extra_content"]["google"]["thought_signature"])
            await store.put_many(batch)
            puts += len(batch)
            del batch
        elapsed = time.perf_counter() - started
        rows.append(
            {
                "puts": puts,
                "held": len(store),
                "bytes": sample() - baseline,
                "seconds": elapsed,
                "payload_per_put": payload / puts,
            }
        )
    if kind == "heap":
        tracemalloc.stop()
    return rows


def child(kind: str, args: argparse.Namespace) -> list[dict]:
    command = [
        sys.executable,
        __file__,
        "--measure",
        kind,
        "--entries",
        str(args.entries),
        "--extra",
        str(args.extra),
        "--seed",
        str(args.seed),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        sys.exit(f"{kind} measurement failed:\n{done.stderr}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000, help="max_entries and fill")
    parser.add_argument("--extra", type=int, default=200_000, help="receipts pushed after fill")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--measure", choices=("heap", "rss"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.measure:
        rows = asyncio.run(measure(args.measure, args.entries, args.extra, args.seed))
        print(json.dumps(rows))
        return

    heap = child("heap", args)
    rss = child("rss", args)
    print(
        f"MemoryStore(max_entries={args.entries:,}): receipts of 100-300 base64 characters, "
        f"keys tenant:upstream:call:<id>"
    )
    print(f"{'receipts put':>13}  {'held':>8}  {'heap MiB':>9}  {'heap B/held':>11}  ", end="")
    print(f"{'RSS MiB':>8}  {'put/s':>9}")
    for h, r in zip(heap, rss, strict=True):
        per_entry = h["bytes"] / h["held"] if h["held"] else 0
        rate = r["puts"] / r["seconds"] if r["seconds"] else 0
        print(
            f"{h['puts']:>13,}  {h['held']:>8,}  {h['bytes'] / MiB:>9.1f}  {per_entry:>11,.0f}  "
            f"{r['bytes'] / MiB:>8.1f}  {rate:>9,.0f}"
        )
    payload = heap[-1]["payload_per_put"]
    print(
        f"raw payload (key + signature characters): {payload:.0f} B per receipt, "
        f"{payload * args.entries / MiB:.1f} MiB for {args.entries:,}; "
        "put/s is from the RSS run (no tracemalloc)."
    )


if __name__ == "__main__":
    main()
