"""Record mode's plumbing: one transport factory, cassettes reaching disk through the exchange,
written off the event loop, and none lost at shutdown.

- `upstream_transport` alone picks replaying, recording around live, or live.
- A streamed chat, a non-streamed chat, an upstream error and a passthrough GET each leave a
  cassette holding what the client was sent, numbered in the order the exchanges ended.
- While a cassette's write is stuck on the disk, the proxy still serves other requests and
  streams, and the exchange whose cassette it is has already reached its client.
- A stream the client leaves mid-way is still recorded; the app's shutdown waits for a write
  still in progress.
- delivery knows nothing of recording: it sees only the exchange's client copy.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from proxy.settings.schema import Settings
from proxy.upstream.cassette_files import CassetteShelf
from proxy.upstream.cassettes import Cassette
from proxy.upstream.context import UPSTREAM, ClientCopy, UpstreamContext, client_copy_of
from proxy.upstream.egress import EgressTransport
from proxy.upstream.http1 import Http1Transport
from proxy.upstream.recording import RecordingTransport, ReplayTransport
from proxy.upstream.transports import upstream_transport
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
USER = [{"role": "user", "content": "go"}]
STREAMED = "gemini_indexless_call_stop"  # repaired on the way: the client's bytes differ
TIMEOUT = 5.0


def cassettes(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.json"))


def stream_chat(client: httpx.Client, model: str = STREAMED) -> bytes:
    body = {"model": model, "messages": USER, "stream": True}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        return b"".join(response.iter_raw())


@pytest.fixture
def recording_proxy(tmp_path: Path) -> Iterator[tuple[httpx.Client, Path, Any]]:
    """A recording proxy in front of the fake upstream: its client, record directory, fake."""
    directory = tmp_path / "cassettes"
    with (
        running_fake_upstream() as (fake, fake_url),
        running_proxy(f"{fake_url}/v1", **{"recording.record_dir": str(directory)}) as proxy,
        httpx.Client(base_url=proxy, timeout=TIMEOUT) as client,
    ):
        yield client, directory, fake


def stuck_writes(monkeypatch: pytest.MonkeyPatch, directory: Path) -> tuple[Any, Any]:
    """Make every file write into `directory` wait until the returned `release` is set;
    `started` is set when the first begins. A write on the event loop would stall the proxy."""
    started, release = threading.Event(), threading.Event()
    original = Path.write_bytes

    def write_bytes(path: Path, data: Any) -> int:
        if path.parent == directory:
            started.set()
            release.wait(TIMEOUT * 2)
        return original(path, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    return started, release


# ── one factory ──────────────────────────────────────────────────────────────


def test_the_factory_chooses_replay_recording_or_live(tmp_path: Path) -> None:
    base = {"upstream.base_url": "http://127.0.0.1:9/v1"}
    (tmp_path / "replay").mkdir()
    Cassette("GET", "models", "", {}, b"", status=200).save(tmp_path / "replay" / "a.json")

    replay = Settings().with_values({**base, "recording.replay_dir": str(tmp_path / "replay")})
    assert isinstance(upstream_transport(replay), ReplayTransport)

    record = Settings().with_values({**base, "recording.record_dir": str(tmp_path / "record")})
    recording = upstream_transport(record, {"HTTPS_PROXY": "http://egress.invalid:3128"})
    assert isinstance(recording, RecordingTransport)
    assert isinstance(recording._inner, EgressTransport)  # the environment given is the one used
    assert (tmp_path / "record").is_dir()

    live = Settings().with_values(base)
    assert isinstance(upstream_transport(live, {}), Http1Transport)
    assert isinstance(upstream_transport(live, {"HTTPS_PROXY": "http://e:1"}), EgressTransport)


# ── what is recorded ─────────────────────────────────────────────────────────


def test_every_kind_of_exchange_is_recorded_with_what_the_client_got(
    recording_proxy: tuple[httpx.Client, Path, Any],
) -> None:
    client, directory, _ = recording_proxy
    streamed = stream_chat(client)
    answered = client.post("/v1/chat/completions", json={"model": STREAMED, "messages": USER})
    limited = {"model": "error_openai_429", "messages": USER}
    refused = client.post("/v1/chat/completions", json=limited)
    models = client.get("/v1/models")
    assert (answered.status_code, refused.status_code, models.status_code) == (200, 429, 200)
    wait_until(lambda: len(cassettes(directory)) == 4, "4 cassettes", timeout=10.0)

    names = [path.name for path in cassettes(directory)]
    assert names == [
        f"0001-{STREAMED}-stream-200.json",
        f"0002-{STREAMED}-json-200.json",
        "0003-error_openai_429-json-429.json",
        "0004-models-json-200.json",
    ]
    stream, answer, error, listing = (Cassette.load(path) for path in cassettes(directory))
    assert stream.client_body == streamed
    # The repaired stream, not the upstream's: the copy is delivery's, not the transport's.
    assert stream.client_body != b"".join(chunk.data for chunk in stream.chunks)
    assert answer.client_body == answered.content
    assert error.client_body == refused.content and error.status == 429
    assert (listing.method, listing.path, listing.status) == ("GET", "models", 200)
    assert listing.client_body == models.content and b'"object":"list"' in models.content


def test_a_stream_the_client_leaves_is_still_recorded(tmp_path: Path) -> None:
    directory = tmp_path / "cassettes"
    body = {"model": "openai_text_usage_only_last_chunk", "messages": USER, "stream": True}
    with (
        running_fake_upstream(stall_after=2) as (fake, fake_url),
        running_proxy(f"{fake_url}/v1", **{"recording.record_dir": str(directory)}) as proxy,
    ):
        with (
            httpx.Client(base_url=proxy, timeout=TIMEOUT) as client,
            client.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            first = next(response.iter_raw())
        # The proxy's stream is cancelled when the client goes; its close still saves.
        wait_until(lambda: len(cassettes(directory)) == 1, "1 cassette", timeout=10.0)
        wait_until(lambda: fake.open_streams == 0, "the upstream stream to close", timeout=10.0)
    [cassette] = [Cassette.load(path) for path in cassettes(directory)]
    assert cassette.client_body.startswith(first)
    assert b"[DONE]" not in cassette.client_body


# ── off the event loop ───────────────────────────────────────────────────────


def test_a_slow_disk_does_not_stall_the_proxy(
    recording_proxy: tuple[httpx.Client, Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, directory, _ = recording_proxy
    started, release = stuck_writes(monkeypatch, directory)
    try:
        # The exchange whose cassette is stuck has reached its client in full...
        first = stream_chat(client)
        assert started.wait(TIMEOUT), "the cassette write never began"
        # ...and while it stays stuck, other requests and streams are served.
        assert client.get("/healthz").status_code == 200
        second = stream_chat(client)
        assert second == first
        assert not release.is_set() and cassettes(directory) == []
    finally:
        release.set()
    wait_until(lambda: len(cassettes(directory)) == 2, "2 cassettes", timeout=10.0)
    assert [Cassette.load(p).client_body for p in cassettes(directory)] == [first, second]


def test_shutdown_waits_for_a_cassette_still_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "cassettes"
    started, release = stuck_writes(monkeypatch, directory)
    with (
        running_fake_upstream() as (_, fake_url),
        running_proxy(f"{fake_url}/v1", **{"recording.record_dir": str(directory)}) as proxy,
    ):
        with httpx.Client(base_url=proxy, timeout=TIMEOUT) as client:
            sent = stream_chat(client)
        assert started.wait(TIMEOUT) and not release.is_set()
        assert cassettes(directory) == []
        threading.Timer(0.5, release.set).start()  # the disk catches up during the shutdown
    # The server is down: its lifespan's close returned only once the cassette was on disk.
    assert release.is_set()
    [path] = cassettes(directory)
    assert Cassette.load(path).client_body == sent


def test_the_shelf_numbers_in_hand_over_order_after_existing_files(tmp_path: Path) -> None:
    (tmp_path / "0041-older-json-200.json").write_text("{}")
    shelf = CassetteShelf(tmp_path)

    async def hand_over() -> None:
        for index in range(30):
            shelf.put(Cassette("GET", f"item{index:02d}", "", {}, b"", status=200))
        await shelf.aclose()

    anyio.run(hand_over)
    written = [path.name for path in cassettes(tmp_path)][1:]
    assert written == [f"{42 + i:04d}-item{i:02d}-json-200.json" for i in range(30)]
    assert not list(tmp_path.glob(".*.tmp"))


def test_saving_waits_for_room_but_never_loses_a_cassette(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("proxy.upstream.cassette_files.PENDING_LIMIT", 1)
    started, release = stuck_writes(monkeypatch, tmp_path)
    transport = RecordingTransport(httpx.MockTransport(lambda _: httpx.Response(200)), tmp_path, "")

    async def exchange() -> ClientCopy:
        request = httpx.Request("GET", "http://upstream.invalid/models")
        request.extensions[UPSTREAM] = UpstreamContext("http://upstream.invalid", "")
        response = await transport.handle_async_request(request)
        copy = client_copy_of(response)  # handed back with the response, for the server
        assert copy is not None
        return copy

    async def main() -> None:
        first, second, third = [await exchange() for _ in range(3)]
        await first.save()  # room to spare: at once
        with anyio.move_on_after(0.3) as waited:
            await second.save()
        assert waited.cancelled_caught  # past the limit, saving waits for the disk...
        release.set()
        await third.save()
        await transport.aclose()

    try:
        anyio.run(main)
    finally:
        release.set()
    assert started.is_set()
    # ...and the save cancelled while it waited had handed its cassette over first.
    assert [Cassette.load(p).path for p in cassettes(tmp_path)] == ["models"] * 3


# ── no side channel ──────────────────────────────────────────────────────────


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_delivery_does_not_know_about_recording_and_recording_not_about_live() -> None:
    delivery = imported_modules(ROOT / "proxy/server/delivery.py")
    assert not {m for m in delivery if m.startswith("proxy.upstream.") and "cassette" in m}
    assert "proxy.upstream.recording" not in delivery
    # The factory imports the recording transports, never the other way round.
    assert "proxy.upstream.transports" not in imported_modules(ROOT / "proxy/upstream/recording.py")
    assert "proxy.upstream.recording" in imported_modules(ROOT / "proxy/upstream/transports.py")
