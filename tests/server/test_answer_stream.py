"""Every door's stream loop (proxy/server/answer_stream.py) with a front's translator: the
upstream's SSE is decoded once, and the chunk objects the repair chain hands on are the ones
the translator gets, never encoded and decoded again; the turn is kept before the terminal."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson

from proxy.fronts.responses.events import ResponsesEvents
from proxy.repair.answer import AnswerMachine
from proxy.repair.pipeline import Chunk, Link, RepairChain
from proxy.repair.tally import Tally
from proxy.server.answer_stream import answer_events
from proxy.server.doors.translated import TranslatedRendering
from tests.fronts.responses.events_support import delta, parse, translation


class Marking(Link):
    """A repair that hands on a new chunk object of its own, marked with a value JSON cannot
    carry: a chunk that went through an encoder and a decoder again would have lost it."""

    def __init__(self) -> None:
        self.handed: list[Chunk] = []

    def on_chunk(self, chunk: Chunk) -> list[Chunk] | None:
        out = {**chunk, "marker": object()}
        self.handed.append(out)
        return [out]


class Recording(ResponsesEvents):
    def __init__(self) -> None:
        super().__init__(translation(), {"model": "m"}, token="sf1.tok")
        self.fed: list[Chunk] = []

    def feed(self, chunk: Chunk) -> list[bytes]:
        self.fed.append(chunk)
        return super().feed(chunk)


async def body(*chunks: dict[str, Any]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield b"data: " + orjson.dumps(chunk) + b"\n\n"
    yield b"data: [DONE]\n\n"


def test_the_translator_gets_the_chains_own_chunk_objects() -> None:
    link = Marking()
    translator = Recording()
    order: list[str] = []

    async def keep() -> None:
        order.append("kept")

    async def run() -> list[bytes]:
        machine = AnswerMachine(RepairChain([link], strict=True), Tally("r"), 1 << 20)
        events = answer_events(
            body(delta(content="hel"), delta(content="lo"), delta(finish="stop")),
            machine,
            TranslatedRendering(translator),
            lambda exc: (str(exc), "stream_aborted"),
            keep,
        )
        out = []
        async for piece in events:
            out.append(piece)
            if b"response.completed" in piece:
                order.append("terminal")
        return out

    out = asyncio.run(run())
    assert len(link.handed) == 3
    assert all(fed is handed for fed, handed in zip(translator.fed, link.handed, strict=True))
    assert order == ["kept", "terminal"]
    events = parse([block + b"\n\n" for block in b"".join(out).split(b"\n\n") if block])
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "hello"
