"""The raw TCP relay for bench/perf.py: the floor for any proxy, one more loopback hop.

Accepts on 127.0.0.1, opens a connection to the fake upstream on 127.0.0.1 for each accepted
one, and copies bytes both ways until either side closes; then it closes both. No HTTP
parsing, no buffering beyond the stream's own (asyncio streams on uvloop when installed, as the
fake and uvicorn use). Loopback only: neither address can be chosen, only the ports. Ends on
SIGTERM or SIGINT (perf.py starts it in its own process group, with a parent-death signal).

    python bench/perf_relay.py --port 9001 --upstream-port 9000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from perf_fake import run
from perf_procs import HOST

CHUNK = 1 << 16


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF (or an error) on `reader`."""
    with contextlib.suppress(OSError):
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()


async def relay(
    upstream_port: int, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
) -> None:
    """One accepted connection: its own upstream connection, copies both ways, and both
    closed as soon as either side reaches EOF (or the relay stops)."""
    try:
        upstream_r, upstream_w = await asyncio.open_connection(HOST, upstream_port)
    except OSError:
        client_w.close()
        return
    copies = [
        asyncio.create_task(pipe(client_r, upstream_w)),
        asyncio.create_task(pipe(upstream_r, client_w)),
    ]
    try:
        await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for copy in copies:
            copy.cancel()
        for writer in (client_w, upstream_w):
            writer.close()  # what is still buffered is sent first, then the socket closes


async def serve(port: int, upstream_port: int) -> None:
    connections: set[asyncio.Task] = set()

    def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A task of our own per connection, not the one start_server makes of a coroutine
        # callback: cancelling that one at the end makes Python 3.11 log a traceback.
        task = asyncio.create_task(relay(upstream_port, reader, writer))
        connections.add(task)
        task.add_done_callback(connections.discard)

    server = await asyncio.start_server(accepted, HOST, port, backlog=2048)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    for task in connections:
        task.cancel()  # each closes both of its sockets
    await asyncio.gather(*connections, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, required=True, help="listen on 127.0.0.1:PORT")
    parser.add_argument("--upstream-port", type=int, required=True, help="the fake's port")
    args = parser.parse_args()
    run(serve(args.port, args.upstream_port))


if __name__ == "__main__":
    main()
