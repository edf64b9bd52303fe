"""A chat upstream on 127.0.0.1 that answers each request by the script its `model` names, byte
for byte: a status and head, then HTTP chunks, silences, and where the script says so a cut
connection (the body unfinished, as a dropped upstream leaves it).

It refuses what the upstream it stands for refuses, with that upstream's body, so a proxy
that sends a request anywhere else is answered as it would be in production, not served:
any path but `POST /v1/chat/completions` gets OpenAI's 404 (`Invalid URL (POST /v1/…)`), a
query parameter it does not define (`defines`, none by default) Google's 400 for a query
parameter it cannot bind (the Gemini and Vertex shapes these scripts play come from Google's
front end, which refuses unknown parameters), a body
that is not a JSON object OpenAI's 400, and a model no script names OpenAI's 404. Every
request is recorded, refused or not, so a test can count what reached the upstream.

Built on RawUpstream (raw_upstream.py): one request per connection, `connection: close`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

import orjson

from tests.support.raw_upstream import LAST_CHUNK, RawRequest, RawUpstream, Reply, http_chunk

CHAT_PATH = "/v1/chat/completions"


class Cut:
    """A script step: the upstream closes the connection here, its chunked body unfinished."""


CUT = Cut()
Step = bytes | float | Cut
"""bytes: one HTTP chunk; a float: that many seconds of silence; CUT: the connection drops."""


@dataclass(frozen=True)
class Script:
    """One answer: `steps` after a head with `status` and `content_type`."""

    steps: Sequence[Step] = ()
    status: int = 200
    content_type: str = "text/event-stream"
    headers: tuple[tuple[str, str], ...] = ()


def json_answer(status: int, body: Any, *headers: tuple[str, str]) -> Script:
    """A whole JSON body (an error before the stream, as every upstream sends one)."""
    return Script([orjson.dumps(body)], status, "application/json", headers)


def openai_error_body(message: str, code: str | None = None) -> dict[str, Any]:
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    }


def wrong_target(
    method: str, path: str, query: str, defines: frozenset[str] = frozenset()
) -> tuple[int, Any, str] | None:
    """The refusal of a request sent anywhere but `POST /v1/chat/completions` without a query
    string, as (status, body, message), or None for that one target. Another method or path:
    OpenAI's 404 (`Invalid URL (POST /v1/…)`). A query parameter: Google's 400 for one it
    cannot bind, in the JSON array the OpenAI-compatible endpoint wraps errors in, with the
    `BadRequest` field violation Google's front end adds (the front the Gemini and Vertex shapes
    come from; Claude Code's `?beta=true` gets it when a door passes it on). `defines`: the
    query parameters this upstream's API does define."""
    if method != "POST" or path != CHAT_PATH:
        message = f"Invalid URL ({method} {path})"
        return 404, openai_error_body(message), message
    if not query:
        return None
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    unknown = [name for name in names if name not in defines]
    if names and not unknown:
        return None
    name = unknown[0] if unknown else query
    message = (
        f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query '
        f"parameter. Field '{name}' could not be found in request message."
    )
    violation: dict[str, Any] = {
        "@type": "type.googleapis.com/google.rpc.BadRequest",
        "fieldViolations": [{"description": message}],
    }
    error = {"code": 400, "message": message, "status": "INVALID_ARGUMENT", "details": [violation]}
    return 400, [{"error": error}], message


def _head(script: Script) -> bytes:
    phrase = HTTPStatus(script.status).phrase
    lines = [
        f"HTTP/1.1 {script.status} {phrase}",
        "transfer-encoding: chunked",
        "connection: close",
        f"content-type: {script.content_type}",
        *(f"{name}: {value}" for name, value in script.headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass
class Received:
    """A request as it reached the upstream, and whether the upstream refused it unscripted."""

    method: str
    path: str
    query: str
    body: Any
    refused: str | None


@dataclass
class InTurn:
    """Scripts answered one after the other to the requests for one model, the last one to
    every request after it."""

    scripts: tuple[Script, ...]
    asked: int = 0

    def next(self) -> Script:
        script = self.scripts[min(self.asked, len(self.scripts) - 1)]
        self.asked += 1
        return script


@dataclass
class ScriptedChatUpstream:
    scripts: dict[str, Script | InTurn] = field(default_factory=dict, repr=False)
    received: list[Received] = field(default_factory=list, repr=False)
    defines: frozenset[str] = frozenset()
    """The query parameters it takes (the upstream's own API's); any other is refused."""
    _names: Iterator[int] = field(default_factory=itertools.count, repr=False)

    def __post_init__(self) -> None:
        self._raw = RawUpstream(self._reply)
        self.url = self._raw.url

    def play(self, script: Script) -> str:
        """Registers `script`; the model name that asks for it."""
        name = f"scripted-{next(self._names)}"
        self.scripts[name] = script
        return name

    def play_in_turn(self, *scripts: Script) -> str:
        """Registers `scripts`, answered in turn; the model name that asks for them."""
        name = f"scripted-{next(self._names)}"
        self.scripts[name] = InTurn(scripts)
        return name

    def requests_for(self, model: str) -> list[Received]:
        return [
            r for r in self.received if isinstance(r.body, dict) and r.body.get("model") == model
        ]

    @property
    def refusals(self) -> list[str]:
        """Why the upstream refused what it refused: none of the scripted tests expects one."""
        return [r.refused for r in self.received if r.refused is not None]

    def _reply(self, request: RawRequest) -> Reply:
        method, _, target = request.head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        target = target.rsplit(" ", 1)[0]
        path, _, query = target.partition("?")
        try:
            body: Any = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            body = request.body
        script, refused = self._answer(method, path, query, body)
        self.received.append(Received(method, path, query, body, refused))
        return Reply(pieces=self._play(script))

    def _answer(self, method: str, path: str, query: str, body: Any) -> tuple[Script, str | None]:
        wrong = wrong_target(method, path, query, self.defines)
        if wrong is not None:
            status, error_body, message = wrong
            return json_answer(status, error_body), message
        if not isinstance(body, dict):
            message = "We could not parse the JSON body of your request."
            return json_answer(400, openai_error_body(message)), message
        model = body.get("model")
        if not isinstance(model, str) or model not in self.scripts:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return json_answer(404, openai_error_body(message, "model_not_found")), message
        script = self.scripts[model]
        return (script.next() if isinstance(script, InTurn) else script), None

    def _play(self, script: Script) -> Iterator[bytes]:
        yield _head(script)
        for step in script.steps:
            if isinstance(step, Cut):
                return  # RawUpstream closes the connection: no last chunk
            if isinstance(step, float):
                self._raw.stopping.wait(step)  # bounded, and cut short when the test ends
            else:
                yield http_chunk(step)
        yield LAST_CHUNK


@contextmanager
def running_scripted_upstream(
    defines: frozenset[str] = frozenset(),
) -> Iterator[ScriptedChatUpstream]:
    upstream = ScriptedChatUpstream(defines=defines)
    with upstream._raw:
        yield upstream
