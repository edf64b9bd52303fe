"""The adversarial passes on the two fronts (test_hostile_requests.py, test_hostile_upstream.py):
the real app in process, strict repairs, app exceptions raised, a fake chat upstream standing
in; hostile JSON values and where to put them; what every answer must be.

A hostile request is a valid one with a few mutations: a node replaced by an arbitrary JSON
value (wrong types, huge integers, deep nesting, lone surrogates in escapes, empty and very long
strings), a key removed, a known field added where it does not belong, an item of an unknown
kind inserted. What every answer must be: a status under 500, the front's own error shape with
every 4xx, and a 200 that is a well-formed answer (a stream ending in its terminal event).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from hypothesis import strategies as st

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from tests.fronts.messages_checks import parse as parse_messages
from tests.fronts.messages_checks import violations
from tests.fronts.responses.test_events import check_invariants

Upstream = Callable[[httpx.Request], httpx.Response]
Path = tuple[Any, ...]

INTERPRETER_RECURSION_LIMIT = 1000
"""CPython's default, which a served proxy runs under."""
RESPONSES_HEADERS = {"authorization": "Bearer sk-hostile"}
MESSAGES_HEADERS = {"x-api-key": "sk-hostile", "anthropic-version": "2023-06-01"}

DEEP = {"__nested__": 254}
"""A marker replaced in the encoded body by arrays nested that deep (built as text: no encoder
recurses that far): as deep as a document may nest (proxy/wire/json_codec.py), so wherever it
is put it is one level too deep, or echoed inside a front's event."""
DEEPER = {"__nested__": 1010}
"""Near what orjson reads (1024), past what the interpreter's stack lets the standard library
write."""


class Session:
    """One app (strict repairs, its own receipt store) for requests in turn, app exceptions
    raised to the test; `upstream` may be changed between them."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        settings = Settings().with_values(
            {"upstream.base_url": "http://up.test/v1", "repairs.strict": True}
        )
        self.app = create_app(settings, transport=httpx.MockTransport(self._answer))

    def _answer(self, request: httpx.Request) -> httpx.Response:
        return self.upstream(request)

    def post(self, path: str, content: bytes, headers: dict[str, str]) -> httpx.Response:
        async def run() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=True)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
                sent = {**headers, "content-type": "application/json"}
                return await client.post(path, content=content, headers=sent)

        # Hypothesis lifts the recursion limit while a test runs; a server has the interpreter's.
        lifted = sys.getrecursionlimit()
        sys.setrecursionlimit(INTERPRETER_RECURSION_LIMIT)
        try:
            return asyncio.run(run())
        finally:
            sys.setrecursionlimit(lifted)


def exchange(
    path: str, content: bytes, upstream: Upstream, headers: dict[str, str]
) -> httpx.Response:
    """One request through a fresh app."""
    return Session(upstream).post(path, content, headers)


def encoded(body: Any) -> bytes:
    """JSON as a client could send it: non-ASCII (and lone surrogates) as `\\u` escapes."""
    text = json.dumps(body)
    for marker in (DEEP, DEEPER):
        levels = marker["__nested__"]
        text = text.replace(json.dumps(marker), "[" * levels + "]" * levels)
    return text.encode()


# ── hostile values ──────────────────────────────────────────────────────────

HUGE_INTS = st.sampled_from([2**63, -(2**63) - 1, 2**64 + 1, 10**30, -(10**40)])
STRINGS = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(codec="utf-16", categories=["Cs", "L", "N"]), max_size=6),
    st.sampled_from(["", "\ud800", "a\udfffb", "\x00", "null", "{", "[DONE]", "x" * 70_000]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(),
    HUGE_INTS,
    st.floats(allow_nan=False, allow_infinity=False),
    STRINGS,
)
VALUES = st.one_of(
    st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.text(max_size=8), inner, max_size=3),
        ),
        max_leaves=6,
    ),
    st.sampled_from([DEEP, DEEPER]),
)


def typed_items(
    types: list[str], keys: list[str], plausible: list[Any]
) -> st.SearchStrategy[dict[str, Any]]:
    """Items of a known (or unknown) type, some fields plausible, some hostile."""
    return st.builds(
        lambda kind, fields: {"type": kind, **fields},
        st.sampled_from([*types, "unknown_kind"]),
        st.dictionaries(
            st.sampled_from(keys), st.one_of(st.sampled_from(plausible), VALUES), max_size=4
        ),
    )


def paths(value: Any, here: Path = ()) -> list[Path]:
    """Every node's path in a JSON value (the root's is `()`)."""
    out: list[Path] = [here]
    if isinstance(value, dict):
        for key, inner in value.items():
            out += paths(inner, (*here, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            out += paths(inner, (*here, index))
    return out


def _at(value: Any, path: Path) -> Any:
    for step in path:
        value = value[step]
    return value


@dataclass(frozen=True)
class Mutation:
    kind: str  # "replace", "delete", "add", "insert"
    path: Path
    key: str = ""
    value: Any = None

    def apply(self, body: Any) -> Any:
        if not self.path and self.kind in ("replace", "delete"):
            return self.value if self.kind == "replace" else {}
        node = _at(body, self.path)
        parent = _at(body, self.path[:-1]) if self.path else None
        if self.kind == "replace" and parent is not None:
            parent[self.path[-1]] = self.value
        elif self.kind == "delete" and parent is not None:
            del parent[self.path[-1]]
        elif self.kind == "add" and isinstance(node, dict):
            node[self.key] = self.value
        elif self.kind == "insert" and isinstance(node, list):
            node.insert(len(node) // 2, self.value)
        return body


def mutated(
    base: dict[str, Any], known_keys: list[str], items: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """A strategy: `base` (a fresh copy) after one to three hostile mutations."""

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        body = json.loads(json.dumps(base))
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["replace", "replace", "delete", "add", "insert"]))
            everywhere = paths(body)
            # Below the root (a body that is not an object is one plain refusal); where the
            # mutation means something: a key added to an object, an item to an array.
            fitting = {
                "add": [p for p in everywhere if isinstance(_at(body, p), dict)],
                "insert": [p for p in everywhere if isinstance(_at(body, p), list)],
            }.get(kind, everywhere[1:])
            if not fitting:
                continue
            where = draw(st.sampled_from(fitting))
            # An inserted item is mostly one of a known kind with hostile fields.
            value = draw(st.one_of(items, items, VALUES) if kind == "insert" else VALUES)
            value = json.loads(json.dumps(value))  # a copy: later mutations may edit it
            key = draw(st.sampled_from(known_keys)) if kind == "add" else ""
            body = Mutation(kind, where, key, value).apply(body)
        return body

    return build()


# ── what every answer must be ───────────────────────────────────────────────


def openai_error_problem(response: httpx.Response) -> str | None:
    """None when the body is OpenAI's error shape: {"error": {message, type, param, code}}."""
    try:
        body = response.json()
    except ValueError:
        return f"not JSON: {response.text[:200]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or set(error) != {"message", "type", "param", "code"}:
        return f"not OpenAI's error shape: {body!r:.300}"
    if not isinstance(error["message"], str) or not isinstance(error["type"], str):
        return f"message and type not strings: {body!r:.300}"
    return None


def anthropic_error_problem(response: httpx.Response) -> str | None:
    """None when the body is Anthropic's: {"type": "error", "error": {type, message}}."""
    try:
        body = response.json()
    except ValueError:
        return f"not JSON: {response.text[:200]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or body.get("type") != "error"
        or not isinstance(error, dict)
        or not isinstance(error.get("type"), str)
        or not isinstance(error.get("message"), str)
    ):
        return f"not Anthropic's error shape: {body!r:.300}"
    return None


def responses_events(response: httpx.Response) -> list[dict[str, Any]]:
    """The events' data. Lines end at LF only, as SSE has them: U+0085 or U+2028 inside a JSON
    string (which orjson writes as they are) ends no line."""
    lines = response.content.split(b"\n")
    return [json.loads(line[6:]) for line in lines if line.startswith(b"data: ")]


def _status_allowed(response: httpx.Response, server_errors: frozenset[int]) -> int:
    """The status, under 500 unless the upstream broke (`server_errors`: what may then come)."""
    status = response.status_code
    assert status < 500 or status in server_errors, (status, response.text[:500])
    return status


def check_responses_answer(
    response: httpx.Response, server_errors: frozenset[int] = frozenset()
) -> None:
    """A Responses answer: an error in OpenAI's shape, a stream with its terminal, or a whole
    response object."""
    status = _status_allowed(response, server_errors)
    if status >= 400:
        problem = openai_error_problem(response)
        assert problem is None, (status, problem)
        return
    assert status == 200, status
    if response.headers["content-type"].startswith("text/event-stream"):
        check_invariants(responses_events(response))
    else:
        body = response.json()
        assert body["object"] == "response", body
        assert body["status"] in ("completed", "incomplete", "failed"), body


def check_messages_answer(
    response: httpx.Response, server_errors: frozenset[int] = frozenset()
) -> None:
    """A Messages answer: an error in Anthropic's shape, a stream ending in `message_stop` or
    an `error` event, or a whole message."""
    status = _status_allowed(response, server_errors)
    if status >= 400:
        problem = anthropic_error_problem(response)
        assert problem is None, (status, problem)
        return
    assert status == 200, status
    if response.headers["content-type"].startswith("text/event-stream"):
        events = parse_messages(response.content)
        complete = not events or events[-1]["type"] != "error"
        found = violations(events, complete=complete)
        assert not found, (found, response.text[:2000])
    else:
        body = response.json()
        assert body["type"] == "message" and isinstance(body["content"], list), body
        assert body["stop_reason"] in STOP_REASONS, body


STOP_REASONS = ("end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal")
