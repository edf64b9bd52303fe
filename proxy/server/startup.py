"""The start-up line: where requests go, said once, before the first one arrives."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from proxy import __version__
from proxy.routing.routes import Router, UpstreamRoute
from proxy.settings.schema import Settings
from proxy.store.opening import redis_options


def startup_line(settings: Settings, router: Router, keys_on: bool) -> str:
    """`streamfix 0.1.0 on http://127.0.0.1:8080: default → host (profile gemini); …`: every
    route with its upstream host and profile, the store, the mode, the proxy's keys and the
    upstream client. Hosts and URLs only: no path, query or credential."""
    server = settings.server
    routes = "; ".join(_route(route) for route in [*router.routes, router.default])
    return (
        f"streamfix {__version__} on http://{server.host}:{server.port}: {routes}; "
        f"store {_store(settings)}; mode {_mode(settings)}; "
        f"proxy keys {'on' if keys_on else 'off'}; upstream client {server.upstream_client}"
    )


def shared_store_warnings(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """What start-up says when receipts stay in this process while other replicas answer the
    same clients: their follow-ups miss the receipts (and the Responses front's state, and the
    learned rules) whenever they land elsewhere. Several workers with the memory store are
    refused outright (cli.py); replicas are declared (`server.replicas`), or guessed from
    Kubernetes, whose Service spreads a client's requests over every ready pod."""
    if settings.receipts.store != "memory":
        return []
    replicas = settings.server.replicas
    if replicas > 1:
        return [
            f"server.replicas is {replicas} with the memory receipt store: each replica keeps "
            "its own, so a follow-up landing on another replica misses its receipts; use "
            'Redis (receipts.store = "redis://host:6379/0")'
        ]
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return [
            "running on Kubernetes with the memory receipt store: with more than one replica "
            "(or an autoscaler), a follow-up landing on another pod misses its receipts; use "
            'Redis (receipts.store = "redis://host:6379/0")'
        ]
    return []


def _store(settings: Settings) -> str:
    receipts = settings.receipts
    return "memory" if receipts.store == "memory" else redis_options(receipts, {}).shown


def _route(route: UpstreamRoute) -> str:
    host = urlsplit(route.upstream.base_url).netloc.rpartition("@")[2]
    models = f" [{', '.join(route.patterns)}]" if route.patterns else ""
    key = ", own key" if route.upstream_key else ""
    return f"{route.name}{models} → {host} (profile {route.profile(None).name}{key})"


def _mode(settings: Settings) -> str:
    recording = settings.recording
    if recording.replay_dir:
        return f"replaying {recording.replay_dir}"
    if recording.record_dir:
        return f"recording into {recording.record_dir}"
    return "live"
