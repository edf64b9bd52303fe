"""A fake OpenAI-compatible upstream that replays the transcripts in tests/transcripts/.

It plays the upstream, which is not ours: Gemini's compat endpoint, vLLM, OpenAI, Kimi. The
request's `model` picks the transcript (`model = NAME` replays `NAME.sse` / `NAME.json`), so a
test points the proxy at the fake and asks for the upstream behaviour it wants to see.

Transcripts in tests/transcripts/wire/ are about the SSE framing itself (comment lines, CRLF
line endings) rather than a provider's chunks; they are served the same way but are not in
`transcript_names()`, whose corpus checks require LF-only, data-only events.

Routes:
    POST /v1/chat/completions, POST /v1beta/openai/chat/completions
        stream=true: NAME.sse as text/event-stream, one write per SSE event (see `chunking`);
        otherwise: the transcript's non-streamed "response" body, 404 when it has none.
        Models in ERROR_MODELS answer with that status and body instead (and ERROR_HEADERS).
    GET /v1/models (and /v1beta/openai/models): a model list naming every transcript.
    any other /v1/{path} or /v1beta/openai/{path}: echoes method, path, query, headers, body.
Every request is recorded in `FakeUpstream.requests`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

import anyio
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tests.support.servers import serve_in_thread

TRANSCRIPTS_DIR = Path(__file__).resolve().parents[1] / "transcripts"
WIRE_TRANSCRIPTS_DIR = TRANSCRIPTS_DIR / "wire"

Chunker = Callable[[bytes], Iterable[bytes]]
Chunking = Literal["event", "bytes"] | Chunker


# ── transcripts ──────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Transcript:
    """One upstream behaviour: the raw stream bytes and its metadata (request, expect, response)."""

    name: str
    sse: bytes
    meta: dict[str, Any]

    @property
    def events(self) -> list[bytes]:
        return split_events(self.sse)

    @property
    def response(self) -> dict[str, Any] | None:
        return self.meta.get("response")


def transcript_names() -> list[str]:
    """Names of every transcript that has both its .sse and .json file, sorted."""
    return sorted(
        path.stem for path in TRANSCRIPTS_DIR.glob("*.sse") if path.with_suffix(".json").exists()
    )


def wire_transcript_names() -> list[str]:
    """Names of the transcripts in tests/transcripts/wire/ (framing cases), sorted."""
    return sorted(
        path.stem
        for path in WIRE_TRANSCRIPTS_DIR.glob("*.sse")
        if path.with_suffix(".json").exists()
    )


def load_transcript(name: str) -> Transcript:
    if name in transcript_names():
        base = TRANSCRIPTS_DIR / name
    elif name in wire_transcript_names():
        base = WIRE_TRANSCRIPTS_DIR / name
    else:
        raise KeyError(f"no transcript named {name!r}")
    meta = orjson.loads(base.with_suffix(".json").read_bytes())
    return Transcript(name=name, sse=base.with_suffix(".sse").read_bytes(), meta=meta)


# Request fields of a transcript that are passed on as SDK keyword arguments.
REQUEST_KWARGS = ("tools", "tool_choice", "n", "parallel_tool_calls", "stream_options")


def sdk_kwargs(transcript: str) -> dict[str, Any]:
    """The transcript's request (tools, n, tool_choice, ... if set) as SDK keyword arguments."""
    request = load_transcript(transcript).meta["request"]
    kwargs = {key: request[key] for key in REQUEST_KWARGS if request.get(key) is not None}
    if not kwargs.get("tools"):
        kwargs.pop("tools", None)
    if request.get("extra_body"):
        kwargs["extra_body"] = request["extra_body"]
    return kwargs


_BLANK_LINES = (b"\r\n\r\n", b"\n\n", b"\r\r")


def split_events(data: bytes) -> list[bytes]:
    """Split an SSE body after each blank line; joining the parts gives `data` back exactly."""
    events: list[bytes] = []
    start = 0
    while start < len(data):
        ends = [i + len(sep) for sep in _BLANK_LINES if (i := data.find(sep, start)) != -1]
        end = min(ends, default=len(data))
        events.append(data[start:end])
        start = end
    return events


def byte_chunks(event: bytes) -> list[bytes]:
    return [event[i : i + 1] for i in range(len(event))]


def random_chunks(seed: int | None = None, max_cuts: int = 4) -> Chunker:
    """A `chunking` callable that cuts every event at up to `max_cuts` random offsets."""
    rng = random.Random(seed)

    def chunk(event: bytes) -> list[bytes]:
        cuts = sorted(rng.sample(range(1, len(event)), min(max_cuts, len(event) - 1)))
        bounds = [0, *cuts, len(event)]
        return [event[a:b] for a, b in pairwise(bounds)]

    return chunk


def split_inside_json(event: bytes) -> list[bytes]:
    """A `chunking` callable: a `data: {…}` event in two pieces, cut halfway through its JSON
    object so that neither piece parses; other events (`[DONE]`, comments) whole."""
    start, end = event.find(b"{"), event.rfind(b"}")
    if start == -1 or end - start < 2:
        return [event]
    cut = (start + end) // 2
    return [event[:cut], event[cut:]]


def split_inside_characters(event: bytes) -> list[bytes]:
    """A `chunking` callable: an event cut right after the first byte of its first multi-byte
    UTF-8 character, so neither piece decodes on its own; events without one whole."""
    lead = next((i for i, byte in enumerate(event) if byte >= 0xC0), None)
    if lead is None:
        return [event]
    return [event[: lead + 1], event[lead + 1 :]]


# ── errors the upstreams send ────────────────────────────────────────────────

GEMINI_SIGNATURE_MESSAGE = (
    "Function call is missing a thought_signature in functionCall parts. This is required for "
    "tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:read` , position 2. Please refer "
    "to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)

ERROR_MODELS: dict[str, tuple[int, Any]] = {
    "error_gemini_array": (
        400,
        [
            {
                "error": {
                    "code": 400,
                    "message": GEMINI_SIGNATURE_MESSAGE,
                    "status": "INVALID_ARGUMENT",
                }
            }
        ],
    ),
    "error_openai_401": (
        401,
        {
            "error": {
                "message": "Incorrect API key provided: sk-fake***********************0000. "
                "You can find your API key at https://platform.openai.com/account/api-keys.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        },
    ),
    "error_openai_429": (
        429,
        {
            "error": {
                "message": "Rate limit reached for gpt-4.1 in organization org-fake on tokens per "
                "min (TPM): Limit 30000, Used 29876, Requested 1205. Please try again in 2.162s. "
                "Visit https://platform.openai.com/account/rate-limits to learn more.",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
    ),
    "error_openai_500": (
        500,
        {
            "error": {
                "message": "The server had an error while processing your request. "
                "Sorry about that!",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        },
    ),
}

# Extra response headers of an error model (a 429 says when to come back).
ERROR_HEADERS: dict[str, dict[str, str]] = {
    "error_openai_429": {"retry-after": "3", "x-ratelimit-reset-tokens": "2.162s"},
}


def openai_error(status: int, message: str, code: str | None = None) -> Response:
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    }
    return json_response(body, status)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(body), status_code=status, headers=headers, media_type="application/json"
    )


# ── the fake ─────────────────────────────────────────────────────────────────


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body, or the raw bytes when it is not JSON (b"" when empty)
    raw: bytes = b""  # the body exactly as it arrived

    @classmethod
    async def read(cls, request: Request) -> RecordedRequest:
        """Everything a test may want to check of a request that reached a fake upstream."""
        raw = await request.body()
        try:
            body: Any = orjson.loads(raw) if raw else raw
        except orjson.JSONDecodeError:
            body = raw
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        return cls(
            method=request.method,
            path=request.url.path,
            query=request.url.query,
            headers=headers,
            body=body,
            raw=raw,
        )

    @property
    def json(self) -> Any:
        return None if isinstance(self.body, bytes) else self.body


@dataclass
class FakeUpstream:
    """The fake upstream's state. Tests may change the knobs between requests.

    chunking: "event" writes each SSE event at once; "bytes" writes one byte at a time; a
        callable gets each event and returns the pieces to write (they must join to the event).
    delay: seconds to sleep between writes (0 still yields to the event loop).
    stall_after: after this many writes, stop sending and hold the stream open until the client
        goes away (an upstream that hangs mid-stream); None streams to the end.
    """

    chunking: Chunking = "event"
    delay: float = 0.0
    stall_after: int | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    open_streams: int = 0
    app: Starlette = field(init=False, repr=False)

    def __post_init__(self) -> None:
        routes: list[Route] = []
        for prefix in ("/v1", "/v1beta/openai"):
            routes += [
                Route(f"{prefix}/chat/completions", self._chat_completions, methods=["POST"]),
                Route(f"{prefix}/models", self._models, methods=["GET"]),
                Route(f"{prefix}/{{path:path}}", self._echo, methods=_ALL_METHODS),
            ]
        self.app = Starlette(routes=routes)

    # routes

    async def _chat_completions(self, request: Request) -> Response | _SSEStream:
        recorded = await self._record(request)
        body = recorded.json
        if not isinstance(body, dict):
            return openai_error(400, "We could not parse the JSON body of your request.")
        model = body.get("model")
        if model in ERROR_MODELS:
            status, error = ERROR_MODELS[model]
            return json_response(error, status, ERROR_HEADERS.get(model))
        try:
            transcript = load_transcript(str(model))
        except KeyError:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return openai_error(404, message, "model_not_found")
        if body.get("stream"):
            return _SSEStream(self, self._pieces(transcript))
        if transcript.response is None:
            message = f"transcript `{model}` has no non-streamed response"
            return openai_error(404, message, "model_not_found")
        return json_response(transcript.response)

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        names = [*transcript_names(), *wire_transcript_names(), *ERROR_MODELS]
        data = [
            {"id": n, "object": "model", "created": 1700000000, "owned_by": "fake"} for n in names
        ]
        return json_response({"object": "list", "data": data})

    async def _echo(self, request: Request) -> Response:
        recorded = await self._record(request)
        raw = recorded.body if isinstance(recorded.body, bytes) else await request.body()
        return JSONResponse(
            {
                "method": recorded.method,
                "path": recorded.path,
                "query": recorded.query,
                "headers": recorded.headers,
                "body": raw.decode("utf-8", errors="replace"),
                "json": recorded.json,
            }
        )

    # helpers

    async def _record(self, request: Request) -> RecordedRequest:
        recorded = await RecordedRequest.read(request)
        self.requests.append(recorded)
        return recorded

    def _pieces(self, transcript: Transcript) -> list[bytes]:
        if self.chunking == "event":
            return transcript.events
        chunker = byte_chunks if self.chunking == "bytes" else self.chunking
        if not callable(chunker):
            raise ValueError(f"unknown chunking {self.chunking!r}")
        pieces: list[bytes] = []
        for event in transcript.events:
            split = [bytes(p) for p in chunker(event)]
            if b"".join(split) != event:
                raise ValueError("chunking callable must return pieces that join to the event")
            pieces += [p for p in split if p]
        return pieces


_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-request-id", b"req_fake_upstream"),
]


class _SSEStream:
    """A raw ASGI response: writes the pieces, counts itself in `open_streams` while it runs.

    Written by hand rather than with StreamingResponse so the counter drops in a `finally`
    both when the stream ends and as soon as the client disconnects.
    """

    def __init__(self, fake: FakeUpstream, pieces: list[bytes]) -> None:
        self.fake = fake
        self.pieces = pieces

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.fake.open_streams += 1
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._cancel_on_disconnect, receive, tg.cancel_scope)
                await self._send_all(send)
                tg.cancel_scope.cancel()
        finally:
            self.fake.open_streams -= 1

    async def _send_all(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        for count, piece in enumerate(self.pieces):
            if count == self.fake.stall_after:
                await anyio.sleep_forever()
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            await anyio.sleep(self.fake.delay)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        scope.cancel()


@contextmanager
def running_fake_upstream(**knobs: Any) -> Iterator[tuple[FakeUpstream, str]]:
    """Serve a FakeUpstream(**knobs) under uvicorn on loopback; yield it and its root URL.

    The root URL has no path: append "/v1" for an OpenAI-style base URL, or
    "/v1beta/openai" for a Gemini-style one.
    """
    fake = FakeUpstream(**knobs)
    with serve_in_thread(fake.app) as base_url:
        yield fake, base_url
