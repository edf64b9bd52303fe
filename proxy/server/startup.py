"""The start-up line: where requests go, said once, before the first one arrives."""

from __future__ import annotations

from urllib.parse import urlsplit

from proxy import __version__
from proxy.settings.schema import Settings
from proxy.upstream.routes import Router, UpstreamRoute
from proxy.wire.credentials import masked_url


def startup_line(settings: Settings, router: Router, keys_on: bool) -> str:
    """`streamfix 0.1.0 on http://127.0.0.1:8080: default → host (profile gemini); …`: every
    route with its upstream host and profile, the store, the mode, the proxy's keys and the
    upstream client. Hosts and URLs only: no path, query or credential."""
    server = settings.server
    routes = "; ".join(_route(route) for route in [*router.routes, router.default])
    return (
        f"streamfix {__version__} on http://{server.host}:{server.port}: {routes}; "
        f"store {masked_url(settings.receipts.store)}; mode {_mode(settings)}; "
        f"proxy keys {'on' if keys_on else 'off'}; upstream client {server.upstream_client}"
    )


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
