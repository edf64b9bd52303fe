"""Writing cassettes to the record directory without blocking the event loop.

Each recorded exchange gets a `CassetteWriter` (on its response, `CLIENT_COPY`), which collects
what the client was sent and, when the exchange is over, hands the finished cassette to the
directory's `CassetteShelf`. The shelf's one worker thread numbers and writes cassettes in the
order they were handed over, so the loop never waits for the disk and numbers stay unique and
ordered; the lifespan's close waits until the shelf is empty.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections import deque
from collections.abc import Mapping
from pathlib import Path

import anyio

from proxy.upstream.cassettes import Cassette, file_name, safe_headers, safe_query
from proxy.upstream.client_requests import ClientRequest

logger = logging.getLogger(__name__)

PENDING_LIMIT = 64
"""Cassettes waiting for the disk before a finished exchange waits for room: a disk far behind
slows recording down instead of holding every cassette in memory."""

ROOM_POLL = 0.01
"""Seconds between looks at the shelf while waiting for room (only past PENDING_LIMIT)."""


class CassetteShelf:
    """Finished cassettes on their way to one directory, written by one thread at a time."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        existing = [int(p.name[:4]) for p in directory.glob("[0-9][0-9][0-9][0-9]-*.json")]
        self._directory = directory
        self._sequence = itertools.count(max(existing, default=0) + 1)
        self._pending: deque[Cassette] = deque()
        self._changed = threading.Condition()
        self._writing = False

    def put(self, cassette: Cassette) -> None:
        """Take a finished cassette; never blocks, so a stream being cancelled still gets its
        cassette in. A worker thread starts when there is work and ends when there is none:
        not a daemon, so even a process ending without its lifespan's close writes them all."""
        with self._changed:
            self._pending.append(cassette)
            if not self._writing:
                self._writing = True
                threading.Thread(target=self._drain, name="streamfix-cassettes").start()

    @property
    def pending(self) -> int:
        with self._changed:
            return len(self._pending)

    async def room(self) -> None:
        """Back-pressure: returns once at most PENDING_LIMIT cassettes wait for the disk."""
        while self.pending > PENDING_LIMIT:
            await anyio.sleep(ROOM_POLL)

    async def aclose(self) -> None:
        """Wait until every cassette handed over is on disk."""
        await anyio.to_thread.run_sync(self._wait_until_written)

    def _wait_until_written(self) -> None:
        with self._changed:
            self._changed.wait_for(lambda: not self._writing)

    def _drain(self) -> None:
        while True:
            with self._changed:
                if not self._pending:
                    self._writing = False
                    self._changed.notify_all()
                    return
                cassette = self._pending[0]  # still pending (counted) while it is written
            try:
                self._write(cassette)
            # Everything, a bug in the encoding too: a dead worker would leave `_writing` set
            # and every later close waiting forever. Logged; the client was answered already.
            except Exception:
                logger.exception("cassette for %s /%s not written", cassette.method, cassette.path)
            finally:
                with self._changed:
                    self._pending.popleft()

    def _write(self, cassette: Cassette) -> None:
        temporary = self._directory / f".{os.getpid()}-{id(cassette)}.tmp"
        temporary.write_bytes(cassette.to_json())
        try:
            # A hard link never replaces an existing file, so worker processes numbering from
            # the same start cannot overwrite each other; a taken number means: the next one.
            while True:
                path = self._directory / file_name(next(self._sequence), cassette)
                try:
                    os.link(temporary, path)
                    break
                except FileExistsError:
                    continue
        finally:
            temporary.unlink()
        logger.info("recorded %s", path.name)


class CassetteWriter:
    """One exchange's `ClientCopy` (upstream/context.py): what the client was sent, and the
    cassette handed to the shelf when the exchange is over."""

    def __init__(
        self, cassette: Cassette, shelf: CassetteShelf, secret_headers: frozenset[str] = frozenset()
    ) -> None:
        self.cassette = cassette
        self._shelf = shelf
        self._secret = secret_headers
        self._client: list[bytes] = []

    def sent(self, data: bytes) -> None:
        self._client.append(data)

    def client_request(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        translation: dict[str, int],
    ) -> None:
        self.cassette.client_request = ClientRequest(
            method,
            path,
            safe_query(query),
            safe_headers(headers, self._secret),
            body,
            dict(translation),
        )

    async def save(self) -> None:
        self.cassette.client_body = b"".join(self._client)
        self._shelf.put(self.cassette)  # before any await: a cancellation cannot lose it
        await self._shelf.room()
