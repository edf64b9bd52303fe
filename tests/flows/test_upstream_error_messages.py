"""A 502 for an upstream failure says where and why: the upstream's host and port (never the
URL's path, query or credentials) and the cause underneath the client's exception: a name that
does not resolve, a refused connection, a TLS failure, a reset. Over real loopback sockets,
through the real proxy under uvicorn, with each of the two upstream clients.

The only name that is not 127.0.0.1 is `streamfix-test.invalid`: the reserved `.invalid` TLD
(RFC 6761) never resolves, and fails locally without a network.
"""

from __future__ import annotations

import re
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import httpx
import pytest
import trustme

from tests.support.loops import server_context
from tests.support.openai_errors import assert_openai_error
from tests.support.proxies import running_proxy
from tests.support.raw_upstream import TEXT_EVENTS, Reply, http_chunk, http_head, raw_upstream
from tests.support.servers import free_port

CLIENT_TIMEOUT = httpx.Timeout(10.0)
CLIENTS = ["http1", "httpx"]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "go"}]}


@contextmanager
def untrusted_tls_upstream(ca: trustme.CA) -> Iterator[int]:
    """A TLS listener on 127.0.0.1 whose certificate comes from a CA the proxy does not trust:
    each connection's handshake fails on the proxy's side. Bounded: the accept loop ends with
    the context, and every socket has a timeout."""
    context = server_context(ca, "127.0.0.1")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(5)
            with suppress(OSError), context.wrap_socket(sock, server_side=True):
                pass  # the client aborts the handshake: nothing to serve
            sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopping.set()
        thread.join(5)
        listener.close()


def post(proxy: str, stream: bool = False) -> httpx.Response:
    body = CHAT | {"stream": stream}
    return httpx.post(f"{proxy}/v1/chat/completions", json=body, timeout=CLIENT_TIMEOUT)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_refused_connection_names_the_upstream_and_never_its_path_or_credentials(
    client: str,
) -> None:
    # Before: "could not connect to the upstream", whichever upstream and whatever the cause.
    # The base URL carries a user, a password and a path: none of them is in the message.
    port = free_port()
    base_url = f"http://user:s3cret-pass@127.0.0.1:{port}/v1/secret-path"
    with running_proxy(base_url, **{"server.upstream_client": client}) as proxy:
        response = post(proxy)
    error = assert_openai_error(response, 502, "upstream_unreachable")
    assert error["message"] == f"upstream 127.0.0.1:{port} refused the connection"
    for secret in ("s3cret", "user", "secret-path", "/v1"):
        assert secret not in response.text


@pytest.mark.parametrize("client", CLIENTS)
def test_a_name_that_does_not_resolve_is_named(client: str) -> None:
    # Before: the same "could not connect to the upstream" as a refused connection, though the
    # fix (a typo in the host name, a DNS outage) is a different one.
    url = "https://streamfix-test.invalid/v1"
    with running_proxy(url, **{"server.upstream_client": client}) as proxy:
        response = post(proxy)
    error = assert_openai_error(response, 502, "upstream_unreachable")
    assert error["message"] == "upstream name streamfix-test.invalid could not be resolved"


@pytest.mark.parametrize("client", CLIENTS)
def test_an_untrusted_certificate_says_tls_failed_and_why(client: str, ca: trustme.CA) -> None:
    # Before: "could not connect to the upstream"; an operator would look for a firewall when
    # the upstream's certificate (or the proxy's trust store) is what is wrong.
    with (
        untrusted_tls_upstream(ca) as port,
        running_proxy(f"https://127.0.0.1:{port}/v1", **{"server.upstream_client": client}) as p,
    ):
        response = post(p)
    error = assert_openai_error(response, 502, "upstream_unreachable")
    prefix = f"TLS with upstream 127.0.0.1:{port} failed: certificate verify failed: "
    assert error["message"].startswith(prefix), error["message"]
    assert "issuer" in error["message"]  # OpenSSL's own reason: the CA is unknown


@pytest.mark.parametrize("client", CLIENTS)
def test_a_reset_before_the_response_says_the_upstream_reset_the_connection(client: str) -> None:
    # Before: the own client said "Server disconnected without sending a response. ([Errno
    # 104] ...)" without naming the upstream, and httpx's only "upstream connection failed:
    # ReadError". The own client keeps its code (a close without an answer) and its own words.
    with (
        raw_upstream(Reply(end="reset")) as upstream,
        running_proxy(f"{upstream.url}/v1", **{"server.upstream_client": client}) as proxy,
    ):
        response = post(proxy)
    where = upstream.url.removeprefix("http://")
    code = "upstream_no_response" if client == "http1" else "upstream_failed"
    error = assert_openai_error(response, 502, code)
    assert error["message"].startswith(f"upstream {where} reset the connection"), error
    if client == "http1":
        assert "without sending a response" in error["message"]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_reset_mid_stream_names_the_upstream_in_the_error_event(client: str) -> None:
    # The stream's closing error event says the same as a 502 would: which upstream, and that
    # it reset the connection. Before: "upstream connection failed: RemoteProtocolError".
    pieces = [http_head(), *(http_chunk(e) for e in TEXT_EVENTS)]
    with (
        raw_upstream(Reply(pieces=pieces, end="reset")) as upstream,
        running_proxy(f"{upstream.url}/v1", **{"server.upstream_client": client}) as proxy,
    ):
        response = post(proxy, stream=True)
    assert response.status_code == 200
    where = re.escape(upstream.url.removeprefix("http://"))
    assert re.search(rf'"message":"upstream {where} reset the connection', response.text), (
        response.text
    )


@pytest.mark.parametrize("target", ["/nope", "/foo/bar", "/v2/chat/completions"])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_404_outside_v1_is_in_openais_error_format(method: str, target: str) -> None:
    # Starlette's own 404 is "Not Found" in text/plain, which OpenAI SDKs report as an
    # unparseable body; `asgi.http_error` answers in OpenAI's format for any path.
    with running_proxy(f"http://127.0.0.1:{free_port()}/v1") as proxy:
        response = httpx.request(method, f"{proxy}{target}", timeout=CLIENT_TIMEOUT)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code"}
    assert (error["type"], error["code"]) == ("invalid_request_error", "not_found")


def test_the_tls_listener_really_serves_tls(ca: trustme.CA) -> None:
    # The TLS test's failure must be the certificate's: a client that trusts the CA completes
    # the handshake with the same listener.
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    with (
        untrusted_tls_upstream(ca) as port,
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        trusting.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() is not None
