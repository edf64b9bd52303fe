"""How many of the proxy's modules one request's `tools` field and one stream event pass through.

Drives the ASGI app in process (no sockets: the numbers are about code paths, not time) with a
fake upstream transport, and records every call into a function of `proxy/` with
`sys.setprofile`. Two windows:

- the request: from the ASGI call until the upstream transport is handed the request (the
  upstream write), for a chat request that declares one tool;
- one stream event: from the moment the fake upstream yields the second event's bytes until the
  ASGI `send` that carries them to the client.

For each window it prints the distinct modules entered (in order of first entry) and the hops:
calls from a function of one module into a function of another. Run it from a checkout's root
(`python bench/hops.py`), or from another commit's worktree with this file copied there, to
compare trees.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import orjson

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))

from proxy.server.app import create_app  # noqa: E402
from proxy.settings.schema import Settings  # noqa: E402

PACKAGE = str(ROOT / "proxy") + os.sep

REQUEST = {
    "model": "m",
    "stream": True,
    "messages": [{"role": "user", "content": "weather in Paris?"}],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ],
}

EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me"}}]},
    {"choices": [{"index": 0, "delta": {"content": " check."}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
]


class Window:
    """Records the proxy's modules entered while open."""

    def __init__(self) -> None:
        self.open = False
        self.modules: list[str] = []
        self.hops = 0

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.open or event != "call":
            return
        callee = _module(frame)
        if callee is None:
            return
        if callee not in self.modules:
            self.modules.append(callee)
        caller = _module(frame.f_back) if frame.f_back else None
        if caller is not None and caller != callee:
            self.hops += 1


def _module(frame: FrameType) -> str | None:
    path = frame.f_code.co_filename
    if not path.startswith(PACKAGE):
        return None
    return path[len(PACKAGE) - len("proxy/") :]


async def run() -> tuple[Window, Window]:
    request_window, event_window = Window(), Window()

    async def upstream_body() -> AsyncIterator[bytes]:
        for number, event in enumerate(EVENTS):
            data = b"data: " + orjson.dumps(event) + b"\n\n"
            if number == 1:
                event_window.open = True
            yield data
        yield b"data: [DONE]\n\n"

    def upstream(request: httpx.Request) -> httpx.Response:
        request_window.open = False  # the upstream write: the request's window ends here
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=upstream_body()
        )

    settings = Settings().with_values({"upstream.base_url": "http://127.0.0.1:9/v1"})
    app = create_app(settings, transport=httpx.MockTransport(upstream))
    body = orjson.dumps(REQUEST)
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            await asyncio.sleep(3600)
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if b"check." in message.get("body", b""):
            event_window.open = False

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8080"),
            (b"content-type", b"application/json"),
            (b"authorization", b"Bearer sk-hops"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        request_window.profile(frame, event, arg)
        event_window.profile(frame, event, arg)

    request_window.open = True
    sys.setprofile(profile)
    try:
        await app(scope, receive, send)
    finally:
        sys.setprofile(None)
    return request_window, event_window


def main() -> None:
    request_window, event_window = asyncio.run(run())
    for name, window in (("request (tools)", request_window), ("one stream event", event_window)):
        print(f"{name}: {len(window.modules)} modules, {window.hops} hops")
        for module in window.modules:
            print(f"  {module}")


if __name__ == "__main__":
    main()
