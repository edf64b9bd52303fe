"""`streamfix replay DIR`: every cassette's request through today's proxy, its upstream
answering with the cassette's bytes, compared with what the client was sent when it was
recorded.

The request goes through the door its client spoke to: a chat client's chat request through
the chat door; a Responses or Messages client's own request (kept beside the chat request it
became, upstream/client_requests.py) through that front's door. So the server's runner,
translation, answer machine and rendering answer it, and nothing here renders an answer. What
a front mints per answer and the heartbeats of a recording (which depend on timing, not on the
repairs) are set aside in the comparison (`FRONTS`); a replay's upstream is never silent, so
it sends none.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from proxy.fronts.messages import replay as messages_replay
from proxy.fronts.minted import AsRecorded
from proxy.fronts.responses import replay as responses_replay
from proxy.repair.conformance import violations
from proxy.repair.phases import Phases
from proxy.routing.routes import CHAT_PATH
from proxy.server.app import PhasesFactory, create_app
from proxy.server.delivery_mode import Mode, delivery_mode
from proxy.server.doors.door import Door
from proxy.server.doors.messages import MESSAGES
from proxy.server.doors.responses import RESPONSES
from proxy.settings.schema import Settings
from proxy.upstream.cassettes import Cassette
from proxy.upstream.recording import ReplayTransport


@dataclass(frozen=True)
class Front:
    """A front door whose client copy a cassette may hold, and how that copy compares with
    today's answer: without the heartbeats, with what each answer mints taken as recorded."""

    title: str
    door: Door[Any, Any]
    recognises: Callable[[bytes], bool]
    """Whether a client copy is this front's answer (for a cassette recorded before the
    client's request was kept)."""
    without_heartbeats: Callable[[bytes], bytes]
    minted: tuple[str, ...]
    without_estimates: Callable[[bytes], bytes] = lambda body: body
    """What a comparison reads as 0: a count the proxy estimated from what it had learned."""

    def as_recorded(self, recorded: bytes, today: bytes) -> AsRecorded:
        """What reads today's bytes with the values this answer minted as recorded."""
        return AsRecorded(self.without_heartbeats(recorded), today, self.minted)

    def comparable(self, recorded: bytes, today: bytes) -> tuple[bytes, bytes]:
        """The recorded client copy and today's answer, as a replay compares them."""
        recorded = self.without_estimates(self.without_heartbeats(recorded))
        today = self.without_estimates(self.without_heartbeats(today))
        return recorded, AsRecorded(recorded, today, self.minted)(today)


FRONTS = (
    Front(
        "Messages",
        MESSAGES,
        messages_replay.is_answer,
        messages_replay.without_pings,
        messages_replay.MINTED,
        messages_replay.without_estimate,
    ),
    Front(
        "Responses",
        RESPONSES,
        responses_replay.is_answer,
        responses_replay.without_keepalives,
        responses_replay.MINTED,
    ),
)

REPLAY_TENANT = "streamfix-replay"
"""The credential a front's replay presents, so its door mints what a client's answer carries
(a receipt token needs a tenant); never sent anywhere (the upstream is the cassette)."""


def front_of(cassette: Cassette) -> Front | None:
    """The front whose client the cassette was recorded for: by the path of the client's
    request, or, in a cassette recorded before it was kept, by the client copy; None for a
    chat client's."""
    request = cassette.client_request
    for front in FRONTS:
        if request is not None and request.path == front.door.path:
            return front
        if request is None and front.recognises(cassette.client_body):
            return front
    return None


@dataclass(frozen=True)
class Sent:
    """A request as a replay sends it to the proxy."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


def chat_request(cassette: Cassette) -> Sent:
    """The chat request the cassette recorded going upstream, to the chat door's path."""
    path = f"/v1/{cassette.path}"
    return Sent(
        cassette.method, path, cassette.query, cassette.request_headers, cassette.request_body
    )


def door_request(cassette: Cassette) -> Sent:
    """The request the cassette's client sent: its own, kept for a front's client, else the
    chat request (a chat client's is its own)."""
    kept = cassette.client_request
    if kept is None:
        return chat_request(cassette)
    return Sent(kept.method, kept.path, kept.query, kept.headers, kept.body)


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
    unreplayable: str = ""
    """Why the cassette cannot be replayed as its client was answered (empty when it can)."""

    @property
    def ok(self) -> bool:
        if self.unreplayable:
            return False
        return not self.violations and (not self.diff or self.updated)


UNREPLAYABLE = (
    "a {} client's cassette recorded before the client's own request was kept: its door "
    "cannot be replayed without it (record it again)"
)


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
    request: Sent | None = None,
) -> httpx.Response:
    """The client's response when `request` (by default the cassette's chat request) goes
    through a proxy whose upstream answers with the cassette's bytes; the body is read in
    full. Cassettes hold no credential, so a replay has no tenant and keeps no receipts, unless
    `credential` gives it one; `headers` are added to the client's (`x-streamfix-debug` for the
    stream's repair counts)."""
    sent = request or chat_request(cassette)
    settings = settings.with_values({"server.keepalive_seconds": 0}, text=False)
    transport = ReplayTransport([cassette], settings.upstream.base_url)
    app = create_app(settings, transport=transport, phases_factory=phases_factory)
    async with app.router.lifespan_context(app):
        client_transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=client_transport, base_url="http://replay"
        ) as client:
            return await client.request(
                sent.method,
                sent.path,
                params=sent.query or None,
                headers={**_with_credential(sent.headers, credential), **(headers or {})},
                content=sent.body,
            )


def _with_credential(headers: dict[str, str], credential: str | None) -> dict[str, str]:
    return {**headers, "authorization": f"Bearer {credential}"} if credential else headers


async def check_cassette(path: Path, settings: Settings) -> CassetteResult:
    cassette = Cassette.load(path)
    settings = settings_for(cassette, settings)
    front = front_of(cassette)
    if front is None:
        response = await replayed(cassette, settings)
        result = CassetteResult(path.name, output=response.content)
        result.diff = diff_lines(cassette.client_body, response.content)
        if delivery_of(cassette, response) is Mode.SSE:
            result.violations = violations(response.content, settings.tool_calls.emit)
        return result
    if cassette.client_request is None:
        return CassetteResult(path.name, unreplayable=UNREPLAYABLE.format(front.title))
    request = door_request(cassette)
    response = await replayed(cassette, settings, credential=REPLAY_TENANT, request=request)
    result = CassetteResult(path.name, output=response.content)
    result.diff = diff_lines(*front.comparable(cassette.client_body, response.content))
    return result


def delivery_of(cassette: Cassette, response: httpx.Response) -> Mode:
    """How the proxy delivered a replayed chat cassette's answer, by the app's own decision:
    from the status and type the client got and the encoding the upstream recorded (a
    repaired body reaches the client decoded). Only a chat completion is ever repaired."""
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
