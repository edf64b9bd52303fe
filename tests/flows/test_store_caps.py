"""Receipt-store entries are size-capped, over real sockets: a one-megabyte signature or call id
from a hostile upstream is not stored, and a flood of signatures keeps the store at
`max_entries`.

Every server is on 127.0.0.1. Each test says in a comment what would break without the
behaviour it checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from proxy.store.memory_store import MemoryStore
from tests.support.chat_requests import chat
from tests.support.servers import OnLoop, serve_in_thread
from tests.support.waiting import wait_until

TIMEOUT = httpx.Timeout(10.0)

CLIENT_KEY = "sk-test-CLIENT-0b9e6a4f1d27"


HOSTILE_MODEL = "gemini-hostile"  # a Google profile by name: the proxy keeps its receipts
SENTINEL_MODEL = "gemini-sentinel"  # answers one small, storable signature on call "sentinel"

Answer = Callable[[bool], Any]


class HostileUpstream:
    """A Google-looking upstream answering HOSTILE_MODEL with whatever `answer(stream)` builds
    (a list of chunk objects for a streamed request, a completion object otherwise), and
    SENTINEL_MODEL with one small signed call."""

    def __init__(self, answer: Answer) -> None:
        self.answers = {HOSTILE_MODEL: answer, SENTINEL_MODEL: answer_with_calls(SENTINEL)}
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        stream = bool(body.get("stream"))
        answer = self.answers[body["model"]](stream)
        if stream:
            events = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in answer)
            return Response(events + b"data: [DONE]\n\n", media_type="text/event-stream")
        return Response(orjson.dumps(answer), media_type="application/json")


def call_entry(call_id: str, signature: str, position: int = 0) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "read_file", "arguments": f'{{"path": "{position}.txt"}}'},
        "extra_content": {"google": {"thought_signature": signature}},
    }


SENTINEL = [call_entry("sentinel", "sig-sentinel")]


def answer_with_calls(calls: list[dict[str, Any]]) -> Answer:
    def answer(stream: bool) -> Any:
        if stream:
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [c]}}]}
                for c in calls
            ]
            finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            return [*chunks, finish]
        message = {"role": "assistant", "tool_calls": calls}
        return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}

    return answer


def answer_with_signed_text(signature: str) -> Answer:
    def answer(stream: bool) -> Any:
        extra = {"google": {"thought_signature": signature}}
        if stream:
            last = {"content": None, "extra_content": extra}
            return [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi."}}]},
                {"choices": [{"index": 0, "delta": last, "finish_reason": "stop"}]},
            ]
        message = {"role": "assistant", "content": "Hi.", "extra_content": extra}
        return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}

    return answer


@dataclass
class Stack:
    url: str
    store: MemoryStore
    on_loop: OnLoop

    # The memory store has no public way to list its entries or weigh each one: these read its
    # private map (key -> (expiry, compact JSON value as bytes, ...)), on the proxy's loop.

    def stored_keys(self) -> list[str]:
        return self.on_loop.run(lambda: list(self.store._entries))

    def sizes(self) -> list[int]:
        """UTF-8 bytes of each entry's key and value."""
        entries = self.store._entries
        return self.on_loop.run(lambda: [len(k.encode()) + len(e[1]) for k, e in entries.items()])

    def count(self) -> int:
        return self.on_loop.run(lambda: len(self.store))


@contextmanager
def proxy_in_front_of(answer: Answer, **values: Any) -> Iterator[Stack]:
    hostile = HostileUpstream(answer)
    with serve_in_thread(hostile.app) as root:
        settings = Settings().with_values(
            {"upstream.base_url": f"{root}/v1", "repairs.strict": True, **values}
        )
        app = create_app(settings)
        store = app.state.proxy.store
        assert isinstance(store, MemoryStore)
        on_loop = OnLoop(app)
        with serve_in_thread(on_loop) as proxy:
            yield Stack(f"{proxy}/v1/chat/completions", store, on_loop)


def exchange(url: str, model: str, stream: bool) -> httpx.Response:
    # With a credential: a request without one keeps no receipts at all.
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    response = httpx.post(url, json=chat(model, stream=stream), headers=headers, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response


def settle(stack: Stack, stream: bool) -> None:
    """Run a sentinel exchange and wait until its receipt is stored: receipts are written
    after the client has the answer (streamed: after `[DONE]`; non-streamed: in a background
    task), so this is how a test knows the exchanges before it have been written, or not."""
    exchange(stack.url, SENTINEL_MODEL, stream)
    wait_until(
        lambda: any(key.endswith(":call:sentinel") for key in stack.stored_keys()),
        "the sentinel receipt to be stored",
    )


BIG = "A" * (1024 * 1024)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    "answer",
    [answer_with_calls([call_entry("call-1", BIG)]), answer_with_signed_text(BIG)],
    ids=["call-signature", "text-signature"],
)
def test_a_one_megabyte_signature_is_not_stored(answer: Answer, stream: bool) -> None:
    # Without `signatures.max_value_bytes`, each such answer would put 1 MiB into the store:
    # at the default cap of 100,000 entries, 100 GiB.
    with proxy_in_front_of(answer, **{"signatures.max_value_bytes": 65_536}) as stack:
        response = exchange(stack.url, HOSTILE_MODEL, stream)
        assert BIG.encode() in response.content  # the client still gets it, untouched
        settle(stack, stream)
        assert [key.rsplit(":", 2)[-2:] for key in stack.stored_keys()] == [["call", "sentinel"]]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_one_megabyte_call_id_does_not_grow_the_store(stream: bool) -> None:
    # The cap weighs only the receipt; the store key carries the upstream's call id, whatever
    # its length. An upstream answering a 1 MiB id with a small signature puts a 1 MiB key
    # into the store per call (100 GiB at the default 100,000 entries). Expected: no entry
    # larger than `max_value_bytes` plus the key's fixed part, however that is achieved
    # (not stored, or keyed by a hash of the id).
    limit = 65_536
    answer = answer_with_calls([call_entry("c" * (1024 * 1024), "sig-small")])
    with proxy_in_front_of(answer, **{"signatures.max_value_bytes": limit}) as stack:
        exchange(stack.url, HOSTILE_MODEL, stream)
        settle(stack, stream)
        sizes = stack.sizes()
        assert all(size <= limit + 512 for size in sizes), sizes


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_flood_of_signatures_keeps_the_store_at_max_entries(stream: bool) -> None:
    # Without the LRU cap, 10,000 distinct signatures from one answer (and as many more from
    # every further answer) would all stay in memory until their TTL.
    max_entries = 50
    calls = [call_entry(f"flood-{i}", f"sig-{i:05d}", i) for i in range(10_000)]
    config = {"signatures.max_entries": max_entries}
    with proxy_in_front_of(answer_with_calls(calls), **config) as stack:
        for _ in range(2):
            exchange(stack.url, HOSTILE_MODEL, stream)
            settle(stack, stream)
            assert stack.count() == max_entries
        assert sum(stack.sizes()) < max_entries * 512
