"""`streamfix replay DIR`: run every cassette's upstream bytes through today's repairs and
compare with what the client was sent when it was recorded."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from proxy.fronts.messages import replay as messages_replay
from proxy.fronts.rendering import Rendering
from proxy.fronts.responses import replay as responses_replay
from proxy.repair.conformance import violations
from proxy.repair.phases import Phases
from proxy.routing.routes import CHAT_PATH
from proxy.server.app import PhasesFactory, create_app
from proxy.server.delivery_mode import Mode, delivery_mode
from proxy.settings.schema import Settings
from proxy.upstream.cassettes import Cassette
from proxy.upstream.recording import ReplayTransport


@dataclass(frozen=True)
class Front:
    """A front whose client copy a cassette may hold: how today's chat answer is rendered for
    it, and what is left out of the recording (the heartbeats that depend on timing, not on
    the repairs)."""

    name: str
    rendering: Callable[[bytes, Any], Rendering | None]
    comparable: Callable[[bytes], bytes]


FRONTS = (
    Front("Messages", messages_replay.rendering, messages_replay.without_pings),
    Front("Responses", responses_replay.rendering, responses_replay.without_keepalives),
)


def front_of(cassette: Cassette) -> tuple[Front, Rendering] | None:
    """The front whose client the cassette's client copy was sent to, with a renderer primed
    with what its recorded answer minted; None for a chat client's cassette."""
    for front in FRONTS:
        found = front.rendering(cassette.client_body, cassette.body_json)
        if found is not None:
            return front, found
    return None


def diff_lines(recorded: bytes, today: bytes) -> list[str]:
    """A unified diff of what the client was sent then and what it would be sent today."""
    if recorded == today:
        return []
    before = recorded.decode("utf-8", "replace").splitlines()
    after = today.decode("utf-8", "replace").splitlines()
    return list(difflib.unified_diff(before, after, "recorded", "today", lineterm="", n=1))


@dataclass
class CassetteResult:
    name: str
    diff: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    output: bytes = b""
    updated: bool = False

    @property
    def ok(self) -> bool:
        return not self.violations and (not self.diff or self.updated)


def settings_for(cassette: Cassette, settings: Settings) -> Settings:
    """Replay a cassette against the upstream it was recorded from: its profile decides the
    rules."""
    if not cassette.upstream_base_url:
        return settings
    return settings.with_values(
        {
            "upstream.base_url": cassette.upstream_base_url,
            "upstream.profile": cassette.profile or "auto",
            "upstream.api_key_env": "",
            "upstream.model": "",
            "routes": [],
        }
    )


async def replayed(
    cassette: Cassette,
    settings: Settings,
    phases_factory: PhasesFactory = Phases,
    credential: str | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """The client's response when the cassette's request goes through a proxy whose upstream
    answers with the cassette's bytes; the body is read in full. Cassettes hold no credential,
    so a replay has no tenant and keeps no receipts, unless `credential` gives it one; `headers`
    are added to the client's (`x-streamfix-debug` for the stream's repair counts)."""
    transport = ReplayTransport([cassette], settings.upstream.base_url)
    app = create_app(settings, transport=transport, phases_factory=phases_factory)
    async with app.router.lifespan_context(app):
        client_transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=client_transport, base_url="http://replay"
        ) as client:
            return await client.request(
                cassette.method,
                f"/v1/{cassette.path}",
                params=cassette.query or None,
                headers={
                    **_with_credential(cassette.request_headers, credential),
                    **(headers or {}),
                },
                content=cassette.request_body,
            )


def _with_credential(headers: dict[str, str], credential: str | None) -> dict[str, str]:
    return {**headers, "authorization": f"Bearer {credential}"} if credential else headers


async def check_cassette(path: Path, settings: Settings) -> CassetteResult:
    cassette = Cassette.load(path)
    settings = settings_for(cassette, settings)
    response = await replayed(cassette, settings)
    output = response.content
    recorded_body = cassette.client_body
    # A front client's cassette: today's chat answer as that front renders it.
    as_front = front_of(cassette)
    if as_front is not None:
        front, rendering = as_front
        output, recorded_body = rendering.render(output), front.comparable(recorded_body)
    result = CassetteResult(path.name, output=output)
    result.diff = diff_lines(recorded_body, output)
    if as_front is None and delivery_of(cassette, response) is Mode.SSE:
        result.violations = violations(output, settings.tool_calls.emit)
    return result


def delivery_of(cassette: Cassette, response: httpx.Response) -> Mode:
    """How the proxy delivered a replayed cassette's answer, by the app's own decision: from
    the status and type the client got and the encoding the upstream recorded (a repaired body
    reaches the client decoded). Only a chat completion is ever repaired."""
    if cassette.method != "POST" or cassette.path.encode() != CHAT_PATH:
        return Mode.RELAY
    body = cassette.body_json
    mode = delivery_mode(
        response.status_code,
        isinstance(body, dict) and bool(body.get("stream")),
        response.headers.get("content-type", ""),
        cassette.response_headers.get("content-encoding", ""),
    ).mode
    return Mode.RELAY if mode is Mode.REFUSED else mode  # a chat client's refusal is relayed


async def check_directory(
    directory: Path, settings: Settings, update: bool = False
) -> list[CassetteResult]:
    """Every cassette's result; with `update`, changed client output is rewritten in place."""
    results = []
    for path in sorted(directory.glob("*.json")):
        result = await check_cassette(path, settings)
        if result.diff and update:
            cassette = Cassette.load(path)
            cassette.client_body = result.output
            cassette.save(path)
            result.updated = True
        results.append(result)
    return results
