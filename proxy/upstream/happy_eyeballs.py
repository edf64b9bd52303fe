"""Connecting to a host name with several addresses: Happy Eyeballs (RFC 8305), on any loop.

A host whose first address does not answer (an IPv6 route that drops packets, one dead address
of several) would otherwise cost the whole connect timeout: the loops try the addresses one
after the other, each until the OS gives up. Here the next address is tried 250 ms after the
previous attempt started, or at once when it failed, and the first TCP connection wins; the
others are cancelled. asyncio's `create_connection(happy_eyeballs_delay=, interleave=)` does
the same, but uvloop's `create_connection` (0.23) takes neither argument, and the proxy runs on
uvloop in production: one implementation for both loops keeps the tested path the used one.

Only TCP is raced; TLS follows on the winning socket, so a far upstream's slow handshake does
not open a second connection. IP literals skip all of this (and the resolver's thread).
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import socket
import ssl
from collections.abc import Callable
from typing import Any, TypeVar

ATTEMPT_DELAY = 0.25  # RFC 8305's recommended Connection Attempt Delay
AddrInfo = tuple[Any, ...]  # (family, type, proto, canonname, sockaddr), as getaddrinfo gives it
ProtocolT = TypeVar("ProtocolT", bound=asyncio.Protocol)


async def resolve(loop: asyncio.AbstractEventLoop, host: str, port: int) -> list[AddrInfo]:
    """The host's TCP addresses, in the resolver's order. The OS resolver (and nscd or
    systemd-resolved where configured) caches; the loop runs the lookup in a thread."""
    return await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)


async def open_connection(
    loop: asyncio.AbstractEventLoop,
    protocol_factory: Callable[[], ProtocolT],
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None,
    delay: float = ATTEMPT_DELAY,
) -> tuple[asyncio.BaseTransport, ProtocolT]:
    """`loop.create_connection` to `host`, racing its addresses when it has more than one."""
    server_hostname = host if ssl_context else None
    if is_ip_literal(host):
        return await loop.create_connection(
            protocol_factory, host, port, ssl=ssl_context, server_hostname=server_hostname
        )
    addresses = interleave(await resolve(loop, host, port))
    sock = await race(loop, addresses, delay)
    try:
        return await loop.create_connection(
            protocol_factory, sock=sock, ssl=ssl_context, server_hostname=server_hostname
        )
    except BaseException:
        sock.close()  # both loops close it themselves on failure; closing twice is harmless
        raise


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def interleave(addresses: list[AddrInfo]) -> list[AddrInfo]:
    """RFC 8305 section 4 with a First Address Family Count of 1 (asyncio's `interleave=1`):
    the resolver's first address, then alternating families, so a broken family costs one
    attempt delay and not one per address of it."""
    by_family: dict[int, list[AddrInfo]] = {}
    for info in addresses:
        by_family.setdefault(info[0], []).append(info)
    rounds = itertools.zip_longest(*by_family.values())
    return [info for round_ in rounds for info in round_ if info is not None]


async def race(
    loop: asyncio.AbstractEventLoop, addresses: list[AddrInfo], delay: float
) -> socket.socket:
    """The first socket to connect. An attempt starts `delay` seconds after the one before, or
    as soon as an attempt fails; the losers are cancelled (and closed) once one connects."""
    if not addresses:
        raise OSError("the host name resolved to no address")
    if len(addresses) == 1:
        return await connect_socket(loop, addresses[0])
    waiting = list(addresses)
    pending: set[asyncio.Task[socket.socket]] = set()
    errors: list[BaseException] = []
    try:
        while waiting or pending:
            if waiting:
                pending.add(loop.create_task(connect_socket(loop, waiting.pop(0))))
            done, pending = await asyncio.wait(
                pending, timeout=delay if waiting else None, return_when=asyncio.FIRST_COMPLETED
            )
            connected = _settle(done, errors)
            if connected is not None:
                return connected
    finally:
        for task in pending:
            task.cancel()
            task.add_done_callback(_close_if_connected)
    raise _combined(errors)


async def connect_socket(loop: asyncio.AbstractEventLoop, address: AddrInfo) -> socket.socket:
    """One TCP connection attempt; the socket is closed unless it is returned."""
    family, type_, proto, _, sockaddr = address
    sock = socket.socket(family, type_, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(sock, sockaddr)
    except BaseException:
        sock.close()
        raise
    return sock


def _settle(
    done: set[asyncio.Task[socket.socket]], errors: list[BaseException]
) -> socket.socket | None:
    """The first connected socket of the finished attempts; later ones close, failures are kept."""
    winner = None
    for task in done:
        error = task.exception()
        if error is not None:
            errors.append(error)
        elif winner is None:
            winner = task.result()
        else:
            task.result().close()  # two connected in the same instant
    return winner


def _close_if_connected(task: asyncio.Task[socket.socket]) -> None:
    """A cancelled attempt may have connected before the cancellation reached it; its error, if
    it failed instead, is retrieved so that the loop does not report it."""
    if task.cancelled():
        return
    if task.exception() is None:
        task.result().close()


def _combined(errors: list[BaseException]) -> BaseException:
    """One error for the caller: the only one, or every address's in one message."""
    if len(errors) == 1 or len({str(error) for error in errors}) == 1:
        return errors[0]
    message = f"all {len(errors)} addresses failed: " + "; ".join(map(str, errors))
    numbers = {getattr(error, "errno", None) for error in errors}
    if len(numbers) == 1 and None not in numbers:
        # Every address failed the same way (localhost's ::1 and 127.0.0.1 both refusing): the
        # errno stays, so OSError picks its subclass (ConnectionRefusedError) and an error
        # message can say "refused" rather than only list the addresses.
        return OSError(numbers.pop(), message)
    return OSError(message)
