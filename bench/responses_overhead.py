"""What the Responses front adds: the same chat stream asked for as chat completions and as
Responses events, through the same in-process app, alternating in one run (issue 29).

    python bench/responses_overhead.py                # 300 rounds of a 200-event stream
    python bench/responses_overhead.py --rounds 50 --events 1000

No sockets: the app is driven through httpx's ASGI transport and answered by an in-process
upstream, so what is measured is the proxy's own work (request translation, the repairs, the
event translation, the store write), as wall time and process CPU per request and per upstream
event. Rounds alternate chat and Responses so drift hits both alike; the median is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator

import httpx
import orjson

from proxy.server.app import create_app
from proxy.settings.schema import Settings


def upstream_stream(events: int) -> bytes:
    chunks = [
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        }
    ]
    chunks += [
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": f"word{n} "}}],
        }
        for n in range(events - 2)
    ]
    chunks.append(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": events, "total_tokens": 9},
        }
    )
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


async def main(rounds: int, events: int) -> None:
    body = upstream_stream(events)

    async def parts() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 4096):
            yield body[start : start + 4096]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=parts())

    settings = Settings().with_values({"upstream.base_url": "http://up.test/v1"})
    app = create_app(settings, transport=httpx.MockTransport(answer))
    chat = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    responses = {"model": "m", "stream": True, "input": "go", "store": False}
    timings: dict[str, list[tuple[float, float]]] = {"chat": [], "responses": []}
    headers = {"authorization": "Bearer sk-bench"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as c:
        for round_ in range(rounds + 5):
            for kind, path, payload in (
                ("chat", "/v1/chat/completions", chat),
                ("responses", "/v1/responses", responses),
            ):
                wall, cpu = time.perf_counter(), time.process_time()
                response = await c.post(path, json=payload, headers=headers)
                assert response.status_code == 200, response.text
                spent = (time.perf_counter() - wall, time.process_time() - cpu)
                if round_ >= 5:  # warm-up rounds left out
                    timings[kind].append(spent)
    base = {
        k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for k, v in timings.items()
    }
    print(f"{events}-event stream, {rounds} rounds each, medians (in-process, no sockets):")
    for kind, (wall, cpu) in base.items():
        print(
            f"  {kind:9}  {wall * 1e3:7.2f} ms wall  {cpu * 1e3:7.2f} ms CPU  "
            f"{cpu / events * 1e6:6.1f} µs CPU/event"
        )
    added_wall = base["responses"][0] - base["chat"][0]
    added_cpu = base["responses"][1] - base["chat"][1]
    print(
        f"  Responses adds {added_wall * 1e3:.2f} ms wall, {added_cpu * 1e3:.2f} ms CPU a "
        f"request: {added_cpu / events * 1e6:.1f} µs CPU per event"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--events", type=int, default=200)
    options = parser.parse_args()
    asyncio.run(main(options.rounds, options.events))
