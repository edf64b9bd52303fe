"""The Messages front's cost: the same upstream stream through the proxy as a chat stream
(`POST /v1/chat/completions`) and as a Messages stream (`POST /v1/messages`), the two taking
turns in one run, against bench/perf_fake.py. Prints, per kind of stream, the median time to
the last byte at concurrency 1 and the proxy's CPU per upstream event (utime + stime of the
proxy process, from /proc), and the difference the front adds.

    python bench/messages_front.py [--events 400] [--rounds 40] [--kinds text,otools,gtools]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(url: str) -> None:
    for _ in range(200):
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{url} did not come up")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def chat_body(model: str) -> dict[str, object]:
    tools = [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    ]
    return {
        "model": model,
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
        "tools": tools,
    }


def messages_body(model: str) -> dict[str, object]:
    tools = [{"name": "read_file", "input_schema": {"type": "object"}}]
    messages = [{"role": "user", "content": "go"}]
    return {
        "model": model,
        "stream": True,
        "max_tokens": 1000,
        "messages": messages,
        "tools": tools,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--kinds", default="text,otools,gtools")
    options = parser.parse_args()
    fake_port, proxy_port = free_port(), free_port()
    python = sys.executable
    fake = subprocess.Popen([python, str(ROOT / "bench/perf_fake.py"), "--port", str(fake_port)])
    environment = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
    environment["STREAMFIX_RECEIPT_SECRET"] = "bench"
    command = [python, "-m", "proxy", "serve", "--host", "127.0.0.1", "--port", str(proxy_port)]
    command += ["--upstream", f"http://127.0.0.1:{fake_port}/v1", "--log-level", "warning"]
    proxy = subprocess.Popen(command, cwd=ROOT, env=environment)
    try:
        wait_for(f"http://127.0.0.1:{fake_port}/health")
        wait_for(f"http://127.0.0.1:{proxy_port}/healthz")
        base = f"http://127.0.0.1:{proxy_port}/v1"
        headers = {"authorization": "Bearer bench", "x-api-key": "bench"}
        print(
            f"{options.events} upstream events per stream, {options.rounds} rounds, concurrency 1"
        )
        with httpx.Client(timeout=60, headers=headers) as client:
            for kind in options.kinds.split(","):
                model = f"bench-{kind}-{options.events}"
                fronts = {
                    "chat": (f"{base}/chat/completions", chat_body(model)),
                    "messages": (f"{base}/messages", messages_body(model)),
                }
                times: dict[str, list[float]] = {name: [] for name in fronts}
                cpu: dict[str, float] = dict.fromkeys(fronts, 0.0)
                for round_number in range(options.rounds + 3):
                    for name, (url, body) in fronts.items():
                        before = cpu_seconds(proxy.pid)
                        started = time.perf_counter()
                        with client.stream("POST", url, json=body) as answer:
                            for _ in answer.iter_raw():
                                pass
                            assert answer.status_code == 200, answer.status_code
                        elapsed = time.perf_counter() - started
                        if round_number >= 3:  # the first rounds warm up
                            times[name].append(elapsed)
                            cpu[name] += cpu_seconds(proxy.pid) - before
                per_event = {n: cpu[n] / (options.rounds * options.events) * 1e6 for n in fronts}
                median = {n: statistics.median(times[n]) * 1e3 for n in fronts}
                chat, front = "chat", "messages"
                print(
                    f"{kind:7} chat {median[chat]:6.2f} ms {per_event[chat]:5.1f} µs CPU/event"
                    f" | messages {median[front]:6.2f} ms {per_event[front]:5.1f} µs CPU/event"
                    f" | added {median[front] - median[chat]:+6.2f} ms,"
                    f" {per_event[front] - per_event[chat]:+5.1f} µs CPU/event"
                )
    finally:
        proxy.terminate()
        fake.terminate()
        proxy.wait(10)
        fake.wait(10)


if __name__ == "__main__":
    main()
