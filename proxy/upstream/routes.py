"""Where a request goes: the first route whose model patterns match, else the default route
(`[upstream]`), and the URL and timeouts on that upstream. Fixed by configuration: no client
header or path can redirect it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from fnmatch import fnmatchcase
from urllib.parse import unquote_plus

import httpx

from proxy.repair.markup.rules import MarkupRules
from proxy.repair.profiles import MessageRules, ProviderProfile, profile_for
from proxy.repair.tenancy import upstream_identity
from proxy.settings.schema import Settings, UpstreamSettings
from proxy.settings.values import ConfigError
from proxy.wire.credentials import CREDENTIAL_PARAMETERS

DEFAULT_ROUTE = "default"


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

    def matches(self, model: str) -> bool:
        return any(fnmatchcase(model, pattern) for pattern in self.patterns)

    def profile(self, model: object) -> ProviderProfile:
        return profile_for(self.upstream.profile, self.upstream.base_url, model)

    def schema_dialect(self, profile: ProviderProfile) -> str:
        """The route's `schema_dialect`, "auto" meaning the profile's."""
        configured = self.upstream.schema_dialect
        if configured == "auto":
            return profile.schema_dialect
        return "" if configured == "none" else configured

    def message_rules(self, profile: ProviderProfile) -> MessageRules:
        """The route's message rules: each key that is "auto" is the profile's."""
        return MessageRules(
            **{
                rule.name: getattr(profile.messages, rule.name)
                if getattr(self.upstream, rule.name) == "auto"
                else getattr(self.upstream, rule.name)
                for rule in fields(MessageRules)
            }
        )

    def tool_name_rule(self, profile: ProviderProfile) -> str:
        """The route's `tool_names` rule, "auto" meaning the profile's."""
        configured = self.upstream.tool_names
        if configured == "auto":
            return profile.tool_name_rule
        return "" if configured == "none" else configured

    def markup(self) -> MarkupRules:
        upstream = self.upstream
        return MarkupRules(
            tool_calls=upstream.text_tool_calls,
            reasoning=upstream.text_reasoning,
            reasoning_field=upstream.reasoning_field,
            think_opened_by_template=upstream.think_opened_by_template,
        )


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
    kept = [
        field
        for field in raw_query.split(b"&")
        if field
        and unquote_plus(field.partition(b"=")[0].decode("latin-1")).lower()
        not in CREDENTIAL_PARAMETERS
    ]
    return b"&".join(kept)


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
