"""Egress proxies: HTTPS_PROXY, HTTP_PROXY, ALL_PROXY and NO_PROXY read as curl, requests and
httpx read them, and the transport that sends each upstream origin through its proxy or direct.

The proxy's own client (proxy/upstream/http1.py) speaks to the upstream only; a proxied origin goes
through httpx's transport instead (`httpx.AsyncHTTPTransport(proxy=...)`: CONNECT tunnels for
https, absolute-form requests for http, socks5 with httpx[socks]), one per proxy URL. Which
origin goes where is decided once per origin, so a request pays one dict look-up, and a process
with no proxy variables gets the direct transport unwrapped
(`proxy.upstream.transports.live_transport`).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import logging
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from proxy.settings.values import ConfigError
from proxy.upstream.http1 import DEFAULT_PORTS, KEEPALIVE_EXPIRY
from proxy.wire.credentials import masked_url

logger = logging.getLogger(__name__)

PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")  # what httpx.Proxy accepts
# Idle tunnels kept per proxy; open ones are not limited, as on the direct path.
KEEPALIVE_PER_PROXY = 64
Origin = tuple[str, str, int]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


# ── reading the environment ──────────────────────────────────────────────────


def proxy_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """`urllib.request.getproxies_environment()` on `environ` rather than os.environ: every
    `<scheme>_proxy` variable, a lower-case name winning over any other spelling and an empty
    lower-case one unsetting it; under CGI (REQUEST_METHOD set) an upper-case HTTP_PROXY is
    ignored, since a client's `Proxy:` header can set it (httpoxy, CVE-2016-1000110)."""
    found: dict[str, str] = {}
    for name, value in environ.items():
        lower = name.lower()
        if value and lower.endswith("_proxy"):
            found[lower[:-6]] = value
    if "REQUEST_METHOD" in environ:
        found.pop("http", None)
    for name, value in environ.items():
        if name.endswith("_proxy"):
            scheme = name.lower()[:-6]
            if value:
                found[scheme] = value
            else:
                found.pop(scheme, None)
    return found


@dataclass(frozen=True, slots=True)
class Bypass:
    """One NO_PROXY entry, with httpx's meaning (httpx/_utils.py get_environment_proxies):
    "example.com" is that host and its subdomains, ".example.com" its subdomains only,
    "localhost" and IP addresses are exact; plus, as curl and requests have it, a CIDR range
    ("10.0.0.0/8"). An optional port ("example.com:8443") or scheme ("http://example.com")
    narrows the entry."""

    scheme: str = ""  # "": any
    host: str = ""  # lower-case; "": any host
    subdomains: bool = True  # a name also matches its subdomains
    itself: bool = True  # a name matches itself
    network: Network | None = None
    port: int | None = None

    def matches(self, scheme: str, host: str, port: int) -> bool:
        if self.scheme and self.scheme != scheme:
            return False
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            address = _ip_address(host)
            return address is not None and address in self.network
        if not self.host:
            return True
        return (self.itself and host == self.host) or (
            self.subdomains and host.endswith("." + self.host)
        )


def parse_bypass(entry: str) -> Bypass:
    """A NO_PROXY entry (not "*", which `EgressRules` handles) as a `Bypass`."""
    scheme, _, rest = entry.rpartition("://")
    scheme = "" if scheme in ("", "all") else scheme.lower()
    host, port = _host_and_port(rest.split("/", 1)[0] if "://" in entry else rest)
    network = _ip_network(host)
    if network is not None:
        return Bypass(scheme=scheme, network=network, port=port)
    host = host.lower()
    if host.startswith(("*.", ".")):  # subdomains only
        return Bypass(scheme=scheme, host=host.lstrip("*."), itself=False, port=port)
    host = host.lstrip("*")
    return Bypass(scheme=scheme, host=host, subdomains=host != "localhost", port=port)


def _host_and_port(text: str) -> tuple[str, int | None]:
    """Host and port of "host", "host:port", "[v6]" or "[v6]:port"; a bare IPv6 address (or
    range) has no port."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    return host, int(port) if port.isdigit() else None


def _ip_network(text: str) -> Network | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _ip_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class EgressRules:
    """Which proxy, if any, an upstream origin goes through: none when a NO_PROXY entry matches
    it ("*" matches everything), else its scheme's (HTTPS_PROXY for https, HTTP_PROXY for http,
    either falling back on ALL_PROXY); as httpx decides with trust_env. `proxies` maps each
    upstream scheme to its proxy URL."""

    def __init__(self, variables: Mapping[str, str]) -> None:
        entries = [entry.strip() for entry in variables.get("no", "").split(",")]
        self.no_proxy = [entry for entry in entries if entry]
        everything = "*" in self.no_proxy
        self.proxies = {} if everything else _proxy_urls(variables)
        self._bypasses = [parse_bypass(entry) for entry in self.no_proxy if entry != "*"]

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> EgressRules:
        return cls(proxy_variables(environ))

    def proxy_for(self, scheme: str, host: str, port: int) -> str | None:
        """The proxy URL for the origin, or None to connect directly."""
        proxy = self.proxies.get(scheme)
        if proxy is None:
            return None
        host = host.lower()
        if any(bypass.matches(scheme, host, port) for bypass in self._bypasses):
            return None
        return proxy


def _proxy_urls(variables: Mapping[str, str]) -> dict[str, str]:
    """The proxy of each upstream scheme, http and https: its own variable's, else ALL_PROXY's;
    "proxy:3128" means http://proxy:3128, as in httpx. A proxy in use is refused at start-up
    when httpx could not use it, rather than failing every request; an unused one is not read."""
    urls = {}
    for scheme in ("http", "https"):
        variable = scheme if variables.get(scheme, "").strip() else "all"
        value = variables.get(variable, "").strip()
        if value:
            urls[scheme] = value if "://" in value else f"http://{value}"
            _check_proxy_url(f"{variable}_proxy", urls[scheme])
    return urls


def _check_proxy_url(variable: str, url: str) -> None:
    shown = masked_url(url)  # the error message is printed: no credentials in it
    if not _usable(url):
        schemes = ", ".join(PROXY_SCHEMES)
        raise ConfigError(f"{variable}: {shown!r} is not a proxy URL httpx can use ({schemes})")
    if url.startswith("socks") and importlib.util.find_spec("socksio") is None:
        raise ConfigError(f"{variable}: {shown!r} needs SOCKS support: pip install 'httpx[socks]'")


def _usable(url: str) -> bool:
    """httpx.Proxy takes it: a scheme it knows, a host, a port that is a number."""
    try:
        parts = urlsplit(url)
        if parts.scheme not in PROXY_SCHEMES or not parts.hostname or parts.port == 0:
            return False
        httpx.Proxy(url)
    except (ValueError, httpx.InvalidURL):  # its message would show the URL unmasked
        return False
    return True


# ── the transport ────────────────────────────────────────────────────────────


class EgressTransport(httpx.AsyncBaseTransport):
    """Each upstream origin through its proxy or the direct transport, decided on its first
    request. Origins come from the configured base URLs, so the table stays small."""

    def __init__(
        self,
        direct: httpx.AsyncBaseTransport,
        rules: EgressRules,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._direct = direct
        self._rules = rules
        self._ssl = ssl_context
        self._routes: dict[Origin, httpx.AsyncBaseTransport] = {}
        self._proxied: dict[str, httpx.AsyncBaseTransport] = {}
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.scheme, url.host, url.port or DEFAULT_PORTS.get(url.scheme, 80))
        transport = self._routes.get(origin)
        if transport is None:
            if self._closed:
                raise httpx.ConnectError("the upstream client is closed", request=request)
            transport = self._route(origin)
        return await transport.handle_async_request(request)

    def announce(self, base_urls: Iterable[str]) -> None:
        """Log, at start-up, the proxies in force and where each configured upstream goes."""
        shown = ", ".join(
            f"{scheme}={masked_url(url)}" for scheme, url in self._rules.proxies.items()
        )
        no_proxy = ",".join(self._rules.no_proxy) or "-"
        logger.info("egress proxies from the environment: %s; NO_PROXY: %s", shown, no_proxy)
        for base_url in base_urls:
            url = httpx.URL(base_url)
            self._route((url.scheme, url.host, url.port or DEFAULT_PORTS.get(url.scheme, 80)))

    def _route(self, origin: Origin) -> httpx.AsyncBaseTransport:
        scheme, host, port = origin
        proxy = self._rules.proxy_for(scheme, host, port)
        transport = self._direct if proxy is None else self._through(proxy)
        self._routes[origin] = transport
        where = f"through proxy {masked_url(proxy)}" if proxy else "direct"
        logger.info("upstream %s://%s:%d goes %s", scheme, _bracketed(host), port, where)
        return transport

    def _through(self, proxy: str) -> httpx.AsyncBaseTransport:
        transport = self._proxied.get(proxy)
        if transport is None:
            transport = self._proxied[proxy] = proxied_transport(proxy, self._ssl)
        return transport

    async def aclose(self) -> None:
        self._closed = True
        self._routes.clear()
        await self._direct.aclose()
        for transport in self._proxied.values():
            await transport.aclose()
        self._proxied.clear()


def proxied_transport(proxy: str, ssl_context: ssl.SSLContext | None) -> httpx.AsyncBaseTransport:
    """httpx's transport through `proxy`, without httpx's default cap of 100 open connections
    (streams are long: a cap would queue them) and with the direct client's idle expiry.
    `ssl_context` verifies the upstream at the far end of the tunnel; None: httpx's default."""
    limits = httpx.Limits(
        max_connections=None,
        max_keepalive_connections=KEEPALIVE_PER_PROXY,
        keepalive_expiry=KEEPALIVE_EXPIRY,
    )
    verify = ssl_context if ssl_context is not None else True
    return httpx.AsyncHTTPTransport(proxy=httpx.Proxy(proxy), verify=verify, limits=limits)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
