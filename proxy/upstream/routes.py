"""Which upstream a request goes to: the first route whose model patterns match, else the
default route (`[upstream]`). Fixed by configuration: no client header can redirect it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

import httpx

from proxy.repair.profiles import ProviderProfile, profile_for
from proxy.settings.schema import ConfigError, Settings, UpstreamSettings
from proxy.repair.tenancy import upstream_identity
from proxy.upstream.headers import client_timeout

DEFAULT_ROUTE = "default"


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    upstream: UpstreamSettings
    patterns: tuple[str, ...]
    upstream_key: str | None
    """The route's own upstream credential, read from the environment at start-up."""
    identity: str
    """Receipts are keyed by this: they validate only on the upstream that issued them."""
    timeout: httpx.Timeout

    def matches(self, model: str) -> bool:
        return any(fnmatchcase(model, pattern) for pattern in self.patterns)

    def profile(self, model: object) -> ProviderProfile:
        return profile_for(self.upstream.profile, self.upstream.base_url, model)


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

    def route_for(self, model: object) -> Route:
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
) -> Route:
    upstream_key = None
    if upstream.api_key_env:
        upstream_key = environ.get(upstream.api_key_env)
        if not upstream_key:
            raise ConfigError(
                f"{key}.api_key_env: environment variable {upstream.api_key_env} is not set"
            )
    return Route(
        name=name,
        upstream=upstream,
        patterns=patterns,
        upstream_key=upstream_key,
        identity=upstream_identity(upstream.base_url),
        timeout=client_timeout(upstream),
    )
