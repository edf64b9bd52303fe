"""What an upstream's response may make the proxy parse and hold: a bounded head, bounded chunk-size
lines and trailers, one unambiguous framing, and trailers that never become headers.

Transport tests run under both event loops (`run`, tests/support/loops.py) against scripted
asyncio servers; the proxy tests run the real proxy under uvicorn in front of a `RawUpstream`.

Each test says in a comment what would break without the behaviour it checks.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from proxy.upstream.http1 import Http1Transport, ResponseTooLarge
from proxy.upstream.http1_connection import MAX_FIELDS, MAX_HEAD_BYTES
from tests.support.openai_errors import assert_openai_error
from tests.support.proxies import running_proxy
from tests.support.raw_upstream import Reply, raw_upstream
from tests.support.scripted_servers import (
    Peer,
    Server,
    answer,
    body_connection,
    fetch,
    fetch_all,
    get,
    pieces,
    pieces_until_error,
)

CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def head_of(size: int, body: bytes = b"ok") -> bytes:
    """A response head of exactly `size` bytes (status line to the blank line), and `body`."""
    start = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Pad: " % len(body)
    end = b"\r\n\r\n"
    return start + b"p" * (size - len(start) - len(end)) + end + body


def fields(count: int) -> bytes:
    """A head holding `count` fields in all, Content-Length among them."""
    lines = [b"HTTP/1.1 200 OK", b"Content-Length: 2"]
    lines += [b"X-Dup: a"] * (count - 1)
    return b"\r\n".join(lines) + b"\r\n\r\nok"


def in_pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def refused(transport: Http1Transport, url: str) -> ResponseTooLarge:
    with pytest.raises(ResponseTooLarge) as caught:
        await fetch(transport, get(url))
    return caught.value


async def closed(peer: Peer) -> None:
    async with asyncio.timeout(3):
        await peer.closed.wait()


# ── the head ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("write", [None, 1000], ids=["one-write", "1000-byte-writes"])
def test_a_head_of_the_limit_is_taken_and_one_byte_more_is_refused(run, write) -> None:
    # Without the count of bytes fed before the head's end, any head is parsed and held: 100 MB
    # of duplicate fields held the event loop over 90 s. The limit counts the status line and
    # every byte up to the blank line, exactly.
    responses = {
        "/fits": head_of(MAX_HEAD_BYTES),
        "/over": head_of(MAX_HEAD_BYTES + 1),
    }

    async def handler(peer: Peer) -> None:
        while (request := await peer.read_request()) is not None:
            path = request.split(b" ")[1].decode()
            await peer.send(*in_pieces(responses[path], write or len(responses[path])))

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            assert await fetch_all(transport, get(server.url + "/fits")) == (200, b"ok")
            error = await refused(transport, server.url + "/over")
            assert str(error) == f"upstream response head exceeds {MAX_HEAD_BYTES} bytes"
            await closed(server.peers[0])  # the connection is closed, never pooled
            assert await fetch_all(transport, get(server.url + "/fits")) == (200, b"ok")
            assert len(server.peers) == 2

    run(main())


def test_a_100_mb_head_is_refused_at_the_limit_and_not_read_further(run) -> None:
    # One field value that never ends. Without the limit httptools joins its pieces (quadratic:
    # the loop held 3.6 s at a time, the request failing after 13.7 s); with it the client
    # parses 64 KiB, closes, and the upstream can write only what the sockets' buffers hold.
    written = 0
    cut_off = asyncio.Event()

    async def handler(peer: Peer) -> None:
        nonlocal written
        await peer.read_request()
        peer.writer.write(b"HTTP/1.1 200 OK\r\nX-Endless: ")
        piece = b"v" * (1024 * 1024)
        try:
            while written < 100 * 1024 * 1024:
                peer.writer.write(piece)
                async with asyncio.timeout(3):
                    await peer.writer.drain()  # raises once the client has closed
                written += len(piece)
        except ConnectionError:
            cut_off.set()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            started = time.monotonic()
            error = await refused(transport, server.url)
            assert str(error) == f"upstream response head exceeds {MAX_HEAD_BYTES} bytes"
            async with asyncio.timeout(3):
                await cut_off.wait()
            assert time.monotonic() - started < 2
        assert written < 32 * 1024 * 1024

    run(main())


def test_more_fields_than_the_limit_are_refused(run) -> None:
    # 5,000 duplicate fields of 1 KB held the loop 6.8 s in httpx's header merging; the count
    # stops any such head at its 101st field, whatever its size.
    responses = {
        "/fits": fields(MAX_FIELDS),
        "/over": fields(MAX_FIELDS + 1),
        "/5000": fields(5000),
    }

    async def handler(peer: Peer) -> None:
        while (request := await peer.read_request()) is not None:
            await peer.send(responses[request.split(b" ")[1].decode()])

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url + "/fits"))
            assert len(response.headers.raw) == MAX_FIELDS
            await pieces(response)
            for path in ("/over", "/5000"):
                started = time.monotonic()
                error = await refused(transport, server.url + path)
                assert str(error) == f"upstream response head has more than {MAX_FIELDS} fields"
                assert time.monotonic() - started < 0.5
            assert len(server.peers) == 2  # the first reused once, each refusal closes its own

    run(main())


def test_the_limits_are_the_transports_to_set(run) -> None:
    # The configuration passes its own limits; without them reaching each connection the
    # defaults would hold whatever was configured.
    small = Http1Transport(max_head_bytes=200, max_fields=3, max_line_bytes=100)

    async def handler(peer: Peer) -> None:
        while (request := await peer.read_request()) is not None:
            path = request.split(b" ")[1]
            if path == b"/long":
                await peer.send(head_of(201))
            elif path == b"/many":
                await peer.send(fields(4))
            else:  # an extension in reads of its own: the limit counts reads without progress
                await peer.send(CHUNKED + b"1;")
                for _ in range(4):
                    await asyncio.sleep(0.02)
                    await peer.send(b"e" * 100)
                await peer.send(b"\r\na\r\n0\r\n\r\n")

    async def main() -> None:
        async with Server(handler) as server, small as transport:
            assert "exceeds 200 bytes" in str(await refused(transport, server.url + "/long"))
            assert "more than 3 fields" in str(await refused(transport, server.url + "/many"))
            response = await fetch(transport, get(server.url + "/ext"))
            _, error = await pieces_until_error(response)
            assert isinstance(error, ResponseTooLarge)
            assert "exceeds 100 bytes" in str(error)

    run(main())


# ── chunk-size lines ─────────────────────────────────────────────────────────


def test_a_chunk_extension_that_goes_on_is_refused(run) -> None:
    # llhttp skips chunk extensions without a limit (measured: 100 MB of one in 0.12 s, nothing
    # buffered): an upstream could keep a stream open sending nothing but one, each read
    # waking the loop, until the read timeout. The body ends with an error after the limit.
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(CHUNKED + b"3\r\nabc\r\n" + b"5;ext=")
        for _ in range(16):
            await peer.send(b"x" * 65536)
        await peer.wait_closed()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            received, error = await pieces_until_error(response)
            assert received == [b"abc"]
            assert isinstance(error, ResponseTooLarge)
            assert "chunk-size line or trailer field exceeds" in str(error)
            await closed(server.peers[0])

    run(main())


def test_short_chunk_extensions_pass(run) -> None:
    # The limit is for lines that go on, not for extensions a server may legitimately send.
    body = CHUNKED + b"3;name=" + b"v" * 1000 + b"\r\nabc\r\n0\r\n\r\n"

    async def main() -> None:
        async with Server(answer(body)) as server, Http1Transport() as transport:
            assert await fetch_all(transport, get(server.url)) == (200, b"abc")

    run(main())


# ── trailers ─────────────────────────────────────────────────────────────────

TRAILERS = b"0\r\nX-Trailer: evil\r\nSet-Cookie: session=evil\r\n\r\n"


@pytest.mark.parametrize("split", [False, True], ids=["one-write", "trailers-later"])
def test_trailers_are_dropped_not_merged_into_the_headers(run, split: bool) -> None:
    # RFC 9110 §6.5.1: trailer fields must not be merged into the header section. Before, every
    # trailer field was appended to the head's list: a response read in one piece handed
    # `Set-Cookie` from the trailers to the client as a header.
    body = b"3\r\nabc\r\n"
    parts = [CHUNKED + body, TRAILERS] if split else [CHUNKED + body + TRAILERS]

    async def handler(peer: Peer) -> None:
        while await peer.read_request() is not None:
            for part in parts:
                await peer.send(part)
                await asyncio.sleep(0.02)

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            for _ in range(2):
                response = await fetch(transport, get(server.url))
                connection = body_connection(response)
                assert b"".join(await pieces(response)) == b"abc"
                assert response.headers.raw == [(b"Transfer-Encoding", b"chunked")]
                assert connection.headers == [(b"Transfer-Encoding", b"chunked")]  # none kept
            assert len(server.peers) == 1  # and the connection stays reusable

    run(main())


@pytest.mark.parametrize(
    ("trailers", "message"),
    [
        (b"X-T: v\r\n" * (MAX_FIELDS + 1), f"trailers exceed {MAX_FIELDS} fields"),
        ((b"X-T: " + b"v" * 1000 + b"\r\n") * 70, f"trailers exceed {MAX_HEAD_BYTES} bytes"),
        (b"X-T: " + b"v" * (1024 * 1024) + b"\r\n", "chunk-size line or trailer field exceeds"),
    ],
    ids=["fields", "bytes", "one-long-field"],
)
def test_trailers_past_the_limits_are_refused(run, trailers: bytes, message: str) -> None:
    # Trailers are dropped, but httptools still parses and buffers them (a field's value whole,
    # joined piece by piece): without limits a trailer section could be as costly as a head.
    async def handler(peer: Peer) -> None:
        await peer.read_request()
        data = CHUNKED + b"3\r\nabc\r\n0\r\n" + trailers + b"\r\n"
        await peer.send(*in_pieces(data, 65536))
        await peer.wait_closed()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            response = await fetch(transport, get(server.url))
            _, error = await pieces_until_error(response)
            assert isinstance(error, ResponseTooLarge)
            assert message in str(error)
            await closed(server.peers[0])

    run(main())


# ── framing ──────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "coding",
    [
        b"chunked, chunked",
        b"chunked\r\nTransfer-Encoding: chunked",
        b"gzip",
        b"chunked, gzip",
        b"identity",
    ],
    ids=["chunked-twice", "two-fields", "gzip", "chunked-not-last", "identity"],
)
def test_a_transfer_encoding_other_than_one_final_chunked_is_refused(run, coding: bytes) -> None:
    # llhttp reads "chunked, chunked" as chunked and a final coding other than chunked as a
    # body until the close; a proxy in front of another parser that reads it otherwise is the
    # stuff of response splitting (RFC 9112 §6.1: chunked once, last).
    response = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding + b"\r\n\r\n3\r\nabc\r\n0\r\n\r\n"

    async def handler(peer: Peer) -> None:
        await peer.read_request()
        await peer.send(response)
        await peer.wait_closed()

    async def main() -> None:
        async with Server(handler) as server, Http1Transport() as transport:
            with pytest.raises(httpx.RemoteProtocolError, match="Transfer-Encoding"):
                await fetch(transport, get(server.url))
            await closed(server.peers[0])

    run(main())


# ── what the proxy's client gets ─────────────────────────────────────────────


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (
            Reply(pieces=[b"HTTP/1.1 200 OK\r\n" + (b"X-Dup: " + b"v" * 1000 + b"\r\n") * 5000]),
            "upstream_response_too_large",
        ),
        (
            Reply(pieces=[b"HTTP/1.1 200 OK\r\n" + b"X-Dup: a\r\n" * 5000 + b"\r\n"]),
            "upstream_response_too_large",
        ),
        (
            Reply(
                pieces=[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"]
            ),
            "upstream_failed",
        ),
    ],
    ids=["5-mb-head", "5000-fields", "chunked-twice"],
)
def test_the_client_gets_a_502_in_openai_format_at_once(reply: Reply, code: str) -> None:
    # The refusal reaches the client as the proxy's own error, promptly, and the request went
    # upstream once. Without the limits the 5 MB head held the proxy 6.8 s (every client with
    # it); before, the app also sent the request once more on the malformed answer.
    with raw_upstream(reply) as upstream, running_proxy(f"{upstream.url}/v1") as proxy:
        started = time.monotonic()
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            timeout=10,
        )
        elapsed = time.monotonic() - started
    error = assert_openai_error(response, 502, code)
    if code != "upstream_failed":
        assert "exceeds 65536 bytes" in error["message"] or "100 fields" in error["message"]
    assert elapsed < 1
    assert len(upstream.requests) == 1


def test_the_proxys_client_never_sees_trailers_as_headers() -> None:
    # The whole response in one write: before, `X-Trailer` and `Set-Cookie` from the trailers
    # were in the head the proxy relayed.
    body = b'{"object":"list","data":[]}'
    chunk = b"%x\r\n%s\r\n" % (len(body), body)
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    with (
        raw_upstream(Reply(pieces=[head + chunk + TRAILERS])) as upstream,
        running_proxy(f"{upstream.url}/v1") as proxy,
    ):
        response = httpx.get(f"{proxy}/v1/models", timeout=10)
    assert response.status_code == 200
    assert response.content == body
    assert "x-trailer" not in response.headers
    assert "set-cookie" not in response.headers
