"""The proxy's three doors as their real clients use them, for tests that hold the doors to one
behaviour: chat completions through openai-python's `chat.completions.create`, the Responses
API through its `responses.create`, Anthropic's Messages through anthropic-python's
`messages.create`; streamed or not.

Each call gives back what the client made of the answer (its chunks or events, its answer
object, or the exception it raised) beside the bytes it read: the clients run on an HTTP
client whose transport keeps a copy of every response body (`Tee`), so a test checks the
real client's reading and the raw SSE of the same response; a stream is also read once more
with plain httpx to its end (`raw_stream`), since a client stops reading at an error event.
door_answers.py reads what came back.

`serving_proxy` runs the proxy as `streamfix serve` does (uvicorn with the proxy's protocol)
on 127.0.0.1; a `Stage` asks a scripted upstream's script of a door and checks that the
upstream was asked exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import httpx2
import openai

from proxy.server.app import create_app
from proxy.server.serving import uvicorn_config
from proxy.settings.schema import Settings
from tests.support.scripted_chat_upstream import Script, ScriptedChatUpstream
from tests.support.servers import free_port, serving_config_in_thread

DOORS = ("chat", "responses", "messages")
KEY = "sk-door-test"
TIMEOUT = 10.0
PROMPT = "What is the weather in Montevideo, and how many pesos is a dollar?"

_SCHEMAS: dict[str, dict[str, Any]] = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}}},
    "get_exchange_rate": {
        "type": "object",
        "properties": {"base": {"type": "string"}, "quote": {"type": "string"}},
    },
}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": s}}
    for n, s in _SCHEMAS.items()
]
RESPONSES_TOOLS = [
    {"type": "function", "name": n, "description": n, "parameters": s, "strict": False}
    for n, s in _SCHEMAS.items()
]
MESSAGES_TOOLS = [{"name": n, "description": n, "input_schema": s} for n, s in _SCHEMAS.items()]


# ── the proxy ────────────────────────────────────────────────────────────────


@contextmanager
def serving_proxy(upstream_root: str, **values: Any) -> Iterator[str]:
    """The proxy in front of `<upstream_root>/v1`, as `streamfix serve` runs it; its root URL."""
    settings = Settings().with_values(
        {
            "upstream.base_url": f"{upstream_root}/v1",
            "server.host": "127.0.0.1",
            "server.port": free_port(),
            "repairs.strict": True,
            **values,
        }
    )
    app = create_app(settings)
    with serving_config_in_thread(uvicorn_config(app, settings.server, "warning")) as served:
        yield served.url


# ── what the client read ─────────────────────────────────────────────────────


class _TeeStream(httpx2.SyncByteStream):
    def __init__(self, inner: httpx2.SyncByteStream, copy: bytearray) -> None:
        self._inner = inner
        self._copy = copy

    def __iter__(self) -> Iterator[bytes]:
        for piece in self._inner:
            self._copy += piece
            yield piece

    def close(self) -> None:
        self._inner.close()


class Tee(httpx2.BaseTransport):
    """The clients' own HTTP transport (both SDKs run on httpx2, httpx's successor), keeping a
    copy of each response body as the client reads it."""

    def __init__(self) -> None:
        self._inner = httpx2.HTTPTransport()
        self.bodies: list[bytearray] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._inner.handle_request(request)
        copy = bytearray()
        self.bodies.append(copy)
        assert isinstance(response.stream, httpx2.SyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_TeeStream(response.stream, copy),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


@dataclass
class Streamed:
    """A streamed request: the client's chunks or events, what it raised while reading them
    (None: the stream ended without one), and the bytes it read (`read`: a client stops at an
    error event; `Stage.streamed` adds the whole body, read apart, in `raw`)."""

    door: str
    items: list[Any]
    error: Exception | None
    read: bytes
    raw: bytes = b""


@dataclass
class Whole:
    """A request answered with one body (asked for one answer, or refused before a stream):
    the client's answer object or the exception `create()` raised, the status and bytes."""

    door: str
    answer: Any
    error: Exception | None
    status: int
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


def _request(door: str, model: str, stream: bool, http: httpx2.Client, base: str) -> Any:
    """The door's real client call: an answer object, or the SDK's stream of items."""
    if door == "chat":
        chat = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, http_client=http)
        return chat.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": PROMPT}],
            tools=CHAT_TOOLS,
            stream=stream,
        )
    if door == "responses":
        sdk = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, http_client=http)
        return sdk.responses.create(
            model=model,
            input=PROMPT,
            tools=RESPONSES_TOOLS,
            stream=stream,
        )
    assert door == "messages", door
    claude = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0, http_client=http)
    return claude.messages.create(
        model=model,
        max_tokens=256,
        messages=[{"role": "user", "content": PROMPT}],
        tools=MESSAGES_TOOLS,
        stream=stream,
    )


_CLIENT_ERRORS = (openai.APIError, anthropic.APIError)


def streamed(door: str, proxy: str, model: str) -> Streamed:
    """`model` asked of `door` with `stream=True`, read to its end."""
    tee = Tee()
    with httpx2.Client(transport=tee, timeout=TIMEOUT) as http:
        items: list[Any] = []
        error: Exception | None = None
        try:
            stream = _request(door, model, True, http, proxy)
            with stream:
                for item in stream:
                    items.append(item)
        except _CLIENT_ERRORS as exc:
            error = exc
    return Streamed(door, items, error, bytes(tee.bodies[-1]) if tee.bodies else b"")


def whole(door: str, proxy: str, model: str, stream: bool = False) -> Whole:
    """`model` asked of `door` for one answer (`stream=False`); with `stream`, a streamed
    request whose answer is expected to be an error status (a stream that came anyway is read
    whole, its items the `answer`)."""
    tee = Tee()
    with httpx2.Client(transport=tee, timeout=TIMEOUT) as http:
        answer: Any = None
        error: Exception | None = None
        status = 200
        try:
            answer = _request(door, model, stream, http, proxy)
            if stream:
                with answer:
                    answer = list(answer)
        except (openai.APIStatusError, anthropic.APIStatusError) as exc:
            error, status = exc, exc.status_code
        except _CLIENT_ERRORS as exc:  # an answer the client could not read
            error = exc
    return Whole(door, answer, error, status, bytes(tee.bodies[-1]) if tee.bodies else b"")


def raw_stream(door: str, proxy: str, model: str) -> bytes:
    """The same streamed request as `streamed`, made with plain httpx and read to the end of
    the body: what follows an error event, which a client stops reading at, shows here."""
    body: dict[str, Any] = {"model": model, "stream": True}
    headers = {"authorization": f"Bearer {KEY}"}
    if door == "chat":
        path = "/v1/chat/completions"
        body.update(messages=[{"role": "user", "content": PROMPT}], tools=CHAT_TOOLS)
    elif door == "responses":
        path = "/v1/responses"
        body.update(input=PROMPT, tools=RESPONSES_TOOLS)
    else:
        path = "/v1/messages"
        body.update(
            max_tokens=256, messages=[{"role": "user", "content": PROMPT}], tools=MESSAGES_TOOLS
        )
        headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    with (
        httpx.Client(timeout=TIMEOUT) as http,
        http.stream("POST", f"{proxy}{path}", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return b"".join(response.iter_raw())


# ── a script asked of a door ─────────────────────────────────────────────────


@dataclass(frozen=True)
class Stage:
    """A scripted upstream and the proxy in front of it. Each ask plays the script under a
    model name of its own and checks that exactly one request reached the upstream for it,
    and that the upstream refused nothing (a path, a query string, a body it does not take)."""

    upstream: ScriptedChatUpstream
    proxy: str

    def streamed(self, door: str, script: Script) -> Streamed:
        """The script asked with `stream=True` by the door's client, and once more read raw."""
        model = self.upstream.play(script)
        result = streamed(door, self.proxy, model)
        self.reached_once(model)
        again = self.upstream.play(script)
        result.raw = raw_stream(door, self.proxy, again)
        self.reached_once(again)
        return result

    def whole(self, door: str, script: Script, stream: bool = False) -> Whole:
        """The script asked for one answer (`stream=False`) by the door's client; with
        `stream`, asked streamed, for a script the door answers with one body (an error)."""
        model = self.upstream.play(script)
        result = whole(door, self.proxy, model, stream)
        sent = self.reached_once(model)
        assert bool(sent.get("stream")) == stream, sent  # the client's choice went up as it was
        return result

    def reached_once(self, model: str) -> Any:
        """The one request body the upstream received for `model`."""
        assert self.upstream.refusals == [], self.upstream.refusals
        received = [r.body for r in self.upstream.requests_for(model)]
        assert len(received) == 1, f"{len(received)} requests reached the upstream for {model}"
        return received[0]
