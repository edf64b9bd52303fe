"""Egress proxies (proxy/upstream/egress.py, proxy/upstream/transports.py live_transport):
HTTPS_PROXY, HTTP_PROXY,
ALL_PROXY and NO_PROXY as httpx reads them, through a forward proxy on loopback.

The environment is always passed explicitly (`live_transport(server, environ)`), never set in
os.environ, so that no proxy variable reaches another test.
"""

from __future__ import annotations

import base64
import logging

import httpx
import pytest
import trustme

from proxy.server.app import create_app
from proxy.settings.schema import ServerSettings, Settings
from proxy.settings.values import ConfigError
from proxy.upstream.egress import EgressRules, EgressTransport, proxy_variables
from proxy.upstream.http1 import Http1Transport
from proxy.upstream.transports import ShardedTransport, live_transport
from proxy.wire.credentials import masked_url
from tests.support.egress_servers import (
    ForwardProxy,
    Upstream,
    client_context,
    fetch,
    get,
    server_context,
)

PROXY = "http://proxy.corp:3128"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def direct_part(transport: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
    return transport._direct if isinstance(transport, EgressTransport) else transport


# ── through a proxy on loopback ──────────────────────────────────────────────


def test_https_upstream_goes_through_one_connect_tunnel(run, ca) -> None:
    async def main() -> None:
        async with (
            Upstream(server_context(ca, "127.0.0.1")) as upstream,
            ForwardProxy() as proxy,
        ):
            environ = {"HTTPS_PROXY": proxy.url()}
            transport = live_transport(ServerSettings(), environ, ssl_context=client_context(ca))
            async with transport:
                for path in ("/v1/a", "/v1/b"):
                    status, body = await fetch(transport, get(upstream.url() + path))
                    assert (status, body) == (200, f"GET {path} HTTP/1.1".encode())
            assert proxy.lines == [f"CONNECT 127.0.0.1:{upstream.port} HTTP/1.1".encode()]
            assert upstream.connections == 1  # the tunnel was kept for the second request

    run(main())


def test_no_proxy_sends_the_origin_direct(run, ca) -> None:
    async def main() -> None:
        async with (
            Upstream(server_context(ca, "127.0.0.1")) as upstream,
            ForwardProxy() as proxy,
        ):
            environ = {"HTTPS_PROXY": proxy.url(), "NO_PROXY": "localhost, 127.0.0.1"}
            transport = live_transport(ServerSettings(), environ, ssl_context=client_context(ca))
            async with transport:
                assert (await fetch(transport, get(upstream.url())))[0] == 200
            assert proxy.connects == 0
            assert upstream.connections == 1

    run(main())


def test_trust_env_false_ignores_the_proxy_variables(run, ca) -> None:
    async def main() -> None:
        async with (
            Upstream(server_context(ca, "127.0.0.1")) as upstream,
            ForwardProxy() as proxy,
        ):
            server = ServerSettings(trust_env=False)
            environ = {"HTTPS_PROXY": proxy.url(), "ALL_PROXY": proxy.url()}
            transport = live_transport(server, environ, ssl_context=client_context(ca))
            assert isinstance(transport, Http1Transport)
            async with transport:
                assert (await fetch(transport, get(upstream.url())))[0] == 200
            assert proxy.heads == []

    run(main())


def test_http_upstream_goes_through_the_proxy_in_absolute_form(run) -> None:
    async def main() -> None:
        async with Upstream() as upstream, ForwardProxy() as proxy:
            transport = live_transport(ServerSettings(), {"http_proxy": proxy.url()})
            async with transport:
                status, body = await fetch(transport, get(upstream.url() + "/v1/models?x=1"))
            assert (status, body) == (200, b"GET /v1/models?x=1 HTTP/1.1")
            target = f"http://127.0.0.1:{upstream.port}/v1/models?x=1"
            assert proxy.lines == [f"GET {target} HTTP/1.1".encode()]

    run(main())


@pytest.mark.parametrize("client", ["http1", "httpx"])
def test_either_client_takes_the_direct_origins(run, client) -> None:
    async def main() -> None:
        async with Upstream() as upstream, ForwardProxy() as proxy:
            environ = {"HTTP_PROXY": proxy.url(), "NO_PROXY": "127.0.0.1"}
            transport = live_transport(ServerSettings(upstream_client=client), environ)
            expected = Http1Transport if client == "http1" else ShardedTransport
            assert isinstance(direct_part(transport), expected)
            async with transport:
                assert (await fetch(transport, get(upstream.url())))[0] == 200
            assert proxy.heads == []

    run(main())


def test_proxy_credentials_are_sent_and_never_logged(run, ca, caplog) -> None:
    caplog.set_level(logging.DEBUG)

    async def main() -> None:
        async with (
            Upstream(server_context(ca, "127.0.0.1")) as upstream,
            ForwardProxy() as proxy,
        ):
            environ = {"https_proxy": proxy.url("alice:s3cr%40t")}
            transport = live_transport(
                ServerSettings(),
                environ,
                ssl_context=client_context(ca),
                base_urls=[upstream.url() + "/v1", "https://api.example.com/v1"],
            )
            async with transport:
                assert (await fetch(transport, get(upstream.url())))[0] == 200
            credentials = base64.b64encode(b"alice:s3cr@t")
            assert b"\r\nProxy-Authorization: Basic " + credentials + b"\r\n" in proxy.heads[0]

    run(main())
    logged = caplog.text
    assert "s3cr" not in logged and "alice" not in logged
    assert "egress proxies from the environment: https=http://****@127.0.0.1:" in logged
    assert "upstream https://api.example.com:443 goes through proxy http://****@127.0.0.1" in logged


def test_a_proxy_refusing_the_tunnel_is_proxy_error(run) -> None:
    async def main() -> None:
        async with ForwardProxy(refuse=True) as proxy:
            transport = live_transport(ServerSettings(), {"HTTPS_PROXY": proxy.url("u:secret")})
            async with transport:
                with pytest.raises(httpx.ProxyError) as caught:
                    await fetch(transport, get("https://upstream.test/v1"))
            assert "secret" not in str(caught.value)
            assert proxy.connects == 1

    run(main())


def test_closing_closes_the_proxied_transports(run) -> None:
    async def main() -> None:
        async with Upstream() as upstream, ForwardProxy() as proxy:
            transport = live_transport(ServerSettings(), {"HTTP_PROXY": proxy.url()})
            assert (await fetch(transport, get(upstream.url())))[0] == 200
            await transport.aclose()
            with pytest.raises(httpx.ConnectError, match="closed"):
                await fetch(transport, get(upstream.url()))
            assert len(proxy.heads) == 1

    run(main())


def test_the_app_relays_through_the_proxy(run) -> None:
    """The whole proxy on the routing transport: a passthrough request, via ASGI in-process."""

    async def main() -> None:
        async with Upstream() as upstream, ForwardProxy() as proxy:
            settings = Settings().with_values({"upstream.base_url": upstream.url() + "/v1"})
            transport = live_transport(settings.server, {"HTTP_PROXY": proxy.url()})
            app = httpx.ASGITransport(app=create_app(settings, transport=transport))
            async with httpx.AsyncClient(transport=app, base_url="http://streamfix") as client:
                response = await client.get("/v1/models")
            await transport.aclose()
        assert (response.status_code, response.text) == (200, "GET /v1/models HTTP/1.1")
        target = f"http://127.0.0.1:{upstream.port}/v1/models"
        assert proxy.lines == [f"GET {target} HTTP/1.1".encode()]

    run(main())


def test_no_proxy_variables_leave_the_direct_transport_unwrapped() -> None:
    assert isinstance(live_transport(ServerSettings(), {}), Http1Transport)
    assert isinstance(live_transport(ServerSettings(), {"NO_PROXY": "*"}), Http1Transport)
    assert isinstance(live_transport(ServerSettings(), {"HTTPS_PROXY": PROXY}), EgressTransport)


# ── reading the variables ────────────────────────────────────────────────────


def decision(environ: dict[str, str], url: str) -> str | None:
    parsed = httpx.URL(url)
    port = parsed.port or {"http": 80, "https": 443}[parsed.scheme]
    return EgressRules.from_environ(environ).proxy_for(parsed.scheme, parsed.host, port)


@pytest.mark.parametrize(
    ("no_proxy", "url", "proxied"),
    [
        ("", "https://api.example.com", True),
        ("*", "https://api.example.com", False),
        ("a.org,*", "https://api.example.com", False),
        ("example.com", "https://example.com", False),
        ("example.com", "https://api.example.com", False),
        ("example.com", "https://notexample.com", True),
        (".example.com", "https://api.example.com", False),
        (".example.com", "https://example.com", True),
        ("EXAMPLE.com", "https://Api.Example.COM", False),
        (" a.org , ,example.com ", "https://example.com", False),
        ("localhost", "http://localhost:8000", False),
        ("localhost", "http://a.localhost:8000", True),
        ("127.0.0.1", "http://127.0.0.1:8000", False),
        ("127.0.0.1", "http://127.0.0.2:8000", True),
        ("::1", "http://[::1]:8000", False),
        ("[::1]", "http://[::1]:8000", False),
        ("10.0.0.0/8", "https://10.20.30.40", False),
        ("10.0.0.0/8", "https://11.0.0.1", True),
        ("fd00::/8", "https://[fd12::1]", False),
        ("example.com:8443", "https://example.com:8443", False),
        ("example.com:8443", "https://example.com", True),
        ("example.com:443", "https://example.com", False),
        ("http://example.com", "http://example.com", False),
        ("http://example.com", "https://example.com", True),
    ],
)
def test_no_proxy_entries(no_proxy: str, url: str, proxied: bool) -> None:
    environ = {"ALL_PROXY": PROXY, "NO_PROXY": no_proxy}
    assert (decision(environ, url) == PROXY) is proxied


@pytest.mark.parametrize(
    "no_proxy",
    ["", "*", "example.com", ".example.com", "localhost", "127.0.0.1", "::1", "example.com:8443"],
)
@pytest.mark.parametrize(
    "url",
    [
        "https://example.com",
        "https://api.example.com",
        "http://notexample.com",
        "http://localhost:8000",
        "http://127.0.0.1:8000",
        "http://[::1]:8000",
        "https://example.com:8443",
    ],
)
def test_decisions_are_httpxs(monkeypatch, no_proxy: str, url: str) -> None:
    """The same answer as httpx.AsyncClient(trust_env=True) from the same variables (set with
    monkeypatch, which restores os.environ after the test)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD"):
        for spelling in (name, name.lower()):
            monkeypatch.delenv(spelling, raising=False)
    environ = {"HTTP_PROXY": PROXY, "HTTPS_PROXY": PROXY, "NO_PROXY": no_proxy}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    client = httpx.AsyncClient(trust_env=True)
    httpx_proxied = client._transport_for_url(httpx.URL(url)) is not client._transport
    assert (decision(environ, url) is not None) is httpx_proxied


def test_scheme_proxy_wins_over_all_proxy_and_bare_host_means_http() -> None:
    environ = {"ALL_PROXY": "http://all:3128", "https_proxy": "corp:3128"}
    assert decision(environ, "https://api.example.com") == "http://corp:3128"
    assert decision(environ, "http://api.example.com") == "http://all:3128"
    assert decision({"HTTP_PROXY": PROXY}, "https://api.example.com") is None


def test_lower_case_wins_and_an_empty_lower_case_unsets() -> None:
    assert proxy_variables({"HTTPS_PROXY": "http://upper", "https_proxy": "http://lower"}) == {
        "https": "http://lower"
    }
    assert proxy_variables({"HTTPS_PROXY": "http://upper", "https_proxy": ""}) == {}
    assert proxy_variables({"no_proxy": "a", "NO_PROXY": "b"})["no"] == "a"


def test_under_cgi_upper_case_http_proxy_is_ignored() -> None:
    """httpoxy: a client's `Proxy:` header becomes HTTP_PROXY in a CGI environment."""
    environ = {"REQUEST_METHOD": "GET", "HTTP_PROXY": "http://evil:1", "HTTPS_PROXY": PROXY}
    assert proxy_variables(environ) == {"https": PROXY}
    assert proxy_variables({**environ, "http_proxy": PROXY})["http"] == PROXY


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ftp://alice:secret@proxy:21", "'ftp://****@proxy:21' is not a proxy URL"),
        ("http://alice:secret@", "'http://****@' is not a proxy URL"),
        ("http://alice:secret@proxy:31x8", "'http://****@proxy:31x8' is not a proxy URL"),
    ],
)
def test_an_unusable_proxy_url_is_refused_at_start_up_without_its_credentials(
    value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match="https_proxy: ") as caught:
        live_transport(ServerSettings(), {"HTTPS_PROXY": value})
    assert message in str(caught.value)
    assert "secret" not in str(caught.value) and "alice" not in str(caught.value)


def test_an_all_proxy_that_no_upstream_scheme_uses_is_not_read() -> None:
    environ = {"ALL_PROXY": "ftp://unused", "HTTP_PROXY": PROXY, "HTTPS_PROXY": PROXY}
    assert EgressRules.from_environ(environ).proxies == {"http": PROXY, "https": PROXY}


def test_socks_needs_socksio() -> None:
    if not _no_socks():
        pytest.skip("socksio is installed")
    with pytest.raises(ConfigError, match=r"httpx\[socks\]"):
        live_transport(ServerSettings(), {"ALL_PROXY": "socks5://proxy:1080"})


def test_masked_hides_user_and_password_and_keeps_the_rest() -> None:
    assert masked_url("http://alice:secret@proxy.corp:3128/") == "http://****@proxy.corp:3128/"
    assert masked_url("http://token@[::1]:3128") == "http://****@[::1]:3128"
    assert masked_url(PROXY) == PROXY
    # The one masker also serves cassettes and `streamfix config`: secret query values too.
    url = "https://u:p@host/v1?alt=sse&key=AIza-secret&password=pw"
    assert masked_url(url) == "https://****@host/v1?alt=sse&key=****&password=****"
    assert masked_url("redis://:pw@127.0.0.1:6379/0") == "redis://****@127.0.0.1:6379/0"


def _no_socks() -> bool:
    import importlib.util

    return importlib.util.find_spec("socksio") is None
