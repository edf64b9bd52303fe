"""Where a request goes: the first route whose model patterns match, else the default route
(`[upstream]`), and the URL and timeouts on that upstream. Fixed by configuration: no client
header or path can redirect it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from urllib.parse import unquote_plus

import httpx

from proxy.repair.profiles import ProviderProfile, profile_for
from proxy.repair.rules import RouteRules, resolve
from proxy.repair.tenancy import upstream_identity
from proxy.routing.provider_names import provider_name
from proxy.settings.schema import Settings, UpstreamSettings
from proxy.settings.values import ConfigError
from proxy.wire.credentials import CREDENTIAL_PARAMETERS

DEFAULT_ROUTE = "default"
CHAT_PATH = b"chat/completions"
"""The chat endpoint, relative to a base URL: nearly every request the proxy forwards."""
RULES_CACHED_MODELS = 256
"""Models whose rules a route keeps at hand; past it, each further model is resolved per request."""


@dataclass(frozen=True, slots=True)
class UpstreamRoute:
    name: str
    upstream: UpstreamSettings
    patterns: tuple[str, ...]
    upstream_key: str | None
    """The route's own upstream credential, read from the environment at start-up."""
    identity: str
    """Receipts are keyed by this: they validate only on the upstream that issued them."""
    timeout: httpx.Timeout
    _resolved: dict[str, RouteRules] = field(default_factory=dict, init=False, compare=False)
    """`rules` by profile name, filled on first use."""
    _by_model: dict[str, RouteRules] = field(default_factory=dict, init=False, compare=False)
    """`rules` by model name, so a request pays a dict lookup, not `profile_for` (bounded)."""
    chat_url: httpx.URL = field(init=False, compare=False)
    """The chat endpoint's URL without a query, built once: parsing it per request cost more
    than the raw TCP relay's whole round trip."""
    provider: str = field(init=False, compare=False)
    """The GenAI provider its spans and token metrics name (provider_names.py)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "chat_url", upstream_url(self.upstream, CHAT_PATH, b""))
        provider = provider_name(self.upstream.base_url, self.upstream.profile, self.name)
        object.__setattr__(self, "provider", provider)

    def matches(self, model: str) -> bool:
        return any(fnmatchcase(model, pattern) for pattern in self.patterns)

    def profile(self, model: object) -> ProviderProfile:
        return profile_for(self.upstream.profile, self.upstream.base_url, model)

    def rules(self, model: object) -> RouteRules:
        """The route's rules for a request naming `model`: its keys resolved against the
        profile that applies, once per profile (a route's keys never change; the profile is
        chosen per request, `profile_for`)."""
        if isinstance(model, str):
            rules = self._by_model.get(model)
            if rules is not None:
                return rules
        profile = self.profile(model)
        rules = self._resolved.get(profile.name)
        if rules is None:
            rules = self._resolved[profile.name] = resolve(self.upstream, profile)
        if isinstance(model, str) and len(self._by_model) < RULES_CACHED_MODELS:
            self._by_model[model] = rules
        return rules

    def url(self, raw_relative: bytes, raw_query: bytes) -> httpx.URL:
        """`upstream_url` on this route's upstream; the chat endpoint's without a query is the
        one built at start-up."""
        if raw_relative == CHAT_PATH and not raw_query:
            return self.chat_url
        return upstream_url(self.upstream, raw_relative, raw_query)


class Router:
    def __init__(self, settings: Settings, environ: Mapping[str, str]) -> None:
        routes = [
            _route(f"routes[{i}]", r.name, r, r.models, environ)
            for i, r in enumerate(settings.routes)
        ]
        self.routes = routes
        self.default = _route("upstream", DEFAULT_ROUTE, settings.upstream, (), environ)

    @property
    def holds_keys(self) -> bool:
        return any(route.upstream_key for route in [*self.routes, self.default])

    def route_for(self, model: object) -> UpstreamRoute:
        if isinstance(model, str):
            for route in self.routes:
                if route.matches(model):
                    return route
        return self.default


def _route(
    key: str,
    name: str,
    upstream: UpstreamSettings,
    patterns: tuple[str, ...],
    environ: Mapping[str, str],
) -> UpstreamRoute:
    upstream_key = None
    if upstream.api_key_env:
        upstream_key = environ.get(upstream.api_key_env)
        if not upstream_key:
            raise ConfigError(
                f"{key}.api_key_env: environment variable {upstream.api_key_env} is not set"
            )
    return UpstreamRoute(
        name=name,
        upstream=upstream,
        patterns=patterns,
        upstream_key=upstream_key,
        identity=upstream_identity(upstream.base_url),
        timeout=client_timeout(upstream),
    )


def without_credential_parameters(raw_query: bytes) -> bytes:
    """The query string minus credential parameters (Google's `?key=`), for when the client's
    credential must not travel upstream."""
    return without_parameters(raw_query, CREDENTIAL_PARAMETERS)[0]


def without_parameters(raw_query: bytes, names: frozenset[str]) -> tuple[bytes, int]:
    """The query string minus the parameters `names` (lower case; a name is compared decoded
    and lower-cased), and how many pairs went."""
    kept: list[bytes] = []
    dropped = 0
    for pair in raw_query.split(b"&"):
        if not pair:
            continue
        if unquote_plus(pair.partition(b"=")[0].decode("latin-1")).lower() in names:
            dropped += 1
        else:
            kept.append(pair)
    return b"&".join(kept), dropped


def upstream_url(settings: UpstreamSettings, raw_relative: bytes, raw_query: bytes) -> httpx.URL:
    """`raw_relative` is the client's path after `/v1/`, as it sent it (checked by
    `paths.checked_relative`); the base URL is fixed by configuration, so no client header or
    path can send the proxy anywhere else."""
    base = httpx.URL(settings.base_url)
    raw_path = base.raw_path.rstrip(b"/") + b"/" + raw_relative.lstrip(b"/")
    if raw_query:
        raw_path += b"?" + raw_query
    return base.copy_with(raw_path=raw_path)


def client_timeout(settings: UpstreamSettings) -> httpx.Timeout:
    return httpx.Timeout(
        connect=settings.connect_timeout,
        read=settings.read_timeout,
        write=settings.read_timeout,
        pool=settings.connect_timeout,
    )
