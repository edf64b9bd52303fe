"""How long a long DeepSeek reasoning stream takes through the proxy, and how long it stalls it.

DeepSeek streams its reasoning a few characters per delta (`reasoning_content`), and the proxy
builds the receipt from every piece. Building it by repeated string concatenation is quadratic
in the number of pieces and runs on the event loop, so one such stream also held up every other
request (issue 13, item 5). This script sends one stream of `--deltas` reasoning deltas, then a
tool call (so the reasoning is a receipt the proxy keeps: 960 KB by default, under
`signatures.max_value_bytes`), and, as a baseline, the same deltas as plain `content`. While each
stream runs, a second connection polls `GET /healthz` back to back; the longest poll is the
stall.

Processes, all on 127.0.0.1: the fake upstream (`--serve-fake PORT`, Starlette under uvicorn,
`--batch` SSE events per write) and the proxy (`python -m proxy serve`, from the checkout this
script lives in, without any `STREAMFIX_*` variable of the calling shell), both ended in
`finally`. The client sends a credential (receipts are kept per credential).

    python bench/receipt_capture.py [--deltas 40000] [--piece 24] [--batch 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from processes import proxy_environ, stop, wait_ready

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
MODEL = "deepseek-reasoner"
TIME_LIMIT = 300  # seconds for the whole run: a regression must not hang the machine


# ── the fake upstream ────────────────────────────────────────────────────────


def events(deltas: int, piece: int, field: str) -> list[bytes]:
    """`deltas` deltas of `piece` characters in `field`, then one tool call and the finish."""
    envelope = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": MODEL}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + orjson.dumps({**envelope, "choices": [choice]}) + b"\n\n"

    text = ("thinking " * (piece // 9 + 1))[:piece]
    out = [event({"role": "assistant", field: text})]
    out += [event({field: text}) for _ in range(deltas - 1)]
    call = {
        "index": 0,
        "id": "call_bench",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
    }
    out.append(event({"tool_calls": [call]}))
    out.append(event({}, "tool_calls"))
    return [*out, b"data: [DONE]\n\n"]


def serve_fake(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    cache: dict[tuple[int, int, str], list[bytes]] = {}

    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        shape = (int(body["deltas"]), int(body["piece"]), str(body["field"]))
        answer = cache.setdefault(shape, events(*shape))
        batch = int(body["batch"])

        async def each() -> Any:
            # Several events per write: the fake must cost less than what is measured.
            for start in range(0, len(answer), batch):
                yield b"".join(answer[start : start + batch])

        return StreamingResponse(each(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    uvicorn.run(app, host=HOST, port=port, log_level="warning", access_log=False)


# ── processes ────────────────────────────────────────────────────────────────


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def start(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=ROOT, env=proxy_environ(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )


# ── the measurement ──────────────────────────────────────────────────────────


async def one_stream(
    proxy: str, deltas: int, piece: int, field: str, batch: int
) -> tuple[float, float]:
    """(seconds for the whole stream, longest /healthz poll meanwhile)."""
    body = {
        "model": MODEL,
        "stream": True,
        "messages": [{"role": "user", "content": "read a.txt"}],
        "deltas": deltas,
        "piece": piece,
        "field": field,
        "batch": batch,
    }
    headers = {"authorization": "Bearer sk-bench"}
    done = asyncio.Event()
    longest = 0.0

    async def poll() -> None:
        nonlocal longest
        async with httpx.AsyncClient(timeout=60) as client:
            while not done.is_set():
                started = time.perf_counter()
                await client.get(f"{proxy}/healthz")
                longest = max(longest, time.perf_counter() - started)

    async with httpx.AsyncClient(timeout=120) as client:
        poller = asyncio.create_task(poll())
        await asyncio.sleep(0.2)  # the poller's connection is open before the stream starts
        started = time.perf_counter()
        size = 0
        async with client.stream(
            "POST", f"{proxy}/v1/chat/completions", json=body, headers=headers
        ) as response:
            response.raise_for_status()
            async for data in response.aiter_bytes():
                size += len(data)
        elapsed = time.perf_counter() - started
        done.set()
        await poller
    if size < deltas * piece:
        raise RuntimeError(f"short answer: {size} bytes")
    return elapsed, longest


async def measure(args: argparse.Namespace) -> None:
    fake_port, proxy_port = free_port(), free_port()
    fake = start([sys.executable, __file__, "--serve-fake", str(fake_port)])
    proxy_command = [sys.executable, "-m", "proxy", "serve"]
    proxy_command += ["--upstream", f"http://{HOST}:{fake_port}/v1", "--profile", "deepseek"]
    proxy_command += ["--host", HOST, "--port", str(proxy_port), "--log-level", "warning"]
    proxy = start(proxy_command)
    try:
        async with httpx.AsyncClient() as client:
            fake_url = f"http://{HOST}:{fake_port}/v1/chat/completions"
            await wait_ready(client, fake_url, fake, below_500=True)  # GET: 405
            await wait_ready(client, f"http://{HOST}:{proxy_port}/healthz", proxy, below_500=True)
        url = f"http://{HOST}:{proxy_port}"
        print(f"proxy from {ROOT}; {args.deltas:,} deltas of {args.piece} characters")
        print(f"{'stream':<20} {'run':>3} {'seconds':>8} {'longest /healthz':>17}")
        for field in ("reasoning_content", "content"):
            for run in range(1, args.runs + 1):
                seconds, stall = await one_stream(url, args.deltas, args.piece, field, args.batch)
                print(f"{field:<20} {run:>3} {seconds:>8.2f} {stall:>15.3f} s")
    finally:
        stop(proxy)
        stop(fake)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=40_000)
    parser.add_argument(
        "--piece", type=int, default=24, help="characters per delta (40,000 x 24: under 1 MiB)"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=20, help="events per upstream write")
    parser.add_argument("--serve-fake", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        serve_fake(args.serve_fake)
        return
    asyncio.run(asyncio.wait_for(measure(args), TIME_LIMIT))


if __name__ == "__main__":
    main()
