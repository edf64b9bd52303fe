"""The third-party internals the proxy relies on are still there, in the shape it uses them.

Two dependencies are used below their documented surface, and pyproject.toml pins each to the
minor these checks were written against:

- uvicorn: `proxy/server/connection_limits.py` subclasses `HttpToolsProtocol`, overrides its
  connection and parser callbacks, reads its per-connection state (`cycle`, `transport`,
  `connections`, `server_state.default_headers`) and re-arms its keep-alive timer
  (`timeout_keep_alive_task`). `proxy/server/serving.py` runs a Config as `uvicorn.run` does
  (`Multiprocess`, `bind_socket`, `Server.started`, `STARTUP_FAILURE`).
- starlette: `proxy/server/streamed_response.py` builds a Response without `Response.__init__`
  (it sets what `StreamingResponse.__init__` sets and calls `init_headers`), and
  `proxy/server/asgi.py`'s hot path does what `Starlette.__call__` does before its middleware.

When an upgrade moves one of these, a test here fails and its message names what moved and
which module depends on it; the end-to-end tests (tests/server/test_client_limits.py) would
only show a symptom. To take a new minor: raise the pin, run this file, fix what it names.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import logging
import textwrap
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import starlette.applications
import starlette.responses
import uvicorn
import uvicorn.config
import uvicorn.server
import uvicorn.supervisors
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from proxy.server import asgi, connection_limits, streamed_response
from proxy.server.connection_limits import ClientLimitsProtocol
from proxy.server.streamed_response import StreamedResponse

ROOT = Path(__file__).resolve().parent.parent
PINNED = ("uvicorn", "starlette")
LIMITS = "proxy/server/connection_limits.py"


# ── the pins ────────────────────────────────────────────────────────────────


def pinned_range(name: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == name:
            return requirement
    raise AssertionError(f"{name} is not a dependency in pyproject.toml")


@pytest.mark.parametrize("name", PINNED)
def test_the_installed_version_is_the_pinned_minor(name: str) -> None:
    requirement = pinned_range(name)
    installed = Version(metadata.version(name))
    assert requirement.specifier.contains(installed), (
        f"{name} {installed} is installed but pyproject.toml pins {requirement.specifier}: "
        "the checks in this file were written for the pinned minor"
    )
    next_minor = Version(f"{installed.major}.{installed.minor + 1}")
    assert not requirement.specifier.contains(next_minor), (
        f"pyproject.toml lets {name} move to {next_minor} ({requirement.specifier}); its "
        "internals are used, so it is pinned to one minor (see this module's docstring)"
    )


# ── reading the proxy's own code ────────────────────────────────────────────


def class_node(module: Any, name: str) -> ast.ClassDef:
    tree = ast.parse(inspect.getsource(module))
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return node


def attributes_read_on(node: ast.AST, owner: Callable[[ast.expr], bool]) -> set[str]:
    """Names of `X.name` anywhere in `node` where `owner(X)` holds."""
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and owner(n.value)}


def is_self(value: ast.expr) -> bool:
    return isinstance(value, ast.Name) and value.id == "self"


def is_cycle(value: ast.expr) -> bool:
    """`cycle` (a local copy of it) or `self.cycle`."""
    if isinstance(value, ast.Name):
        return value.id == "cycle"
    return isinstance(value, ast.Attribute) and value.attr == "cycle" and is_self(value.value)


def is_server_state(value: ast.expr) -> bool:
    return (
        isinstance(value, ast.Attribute) and value.attr == "server_state" and is_self(value.value)
    )


LIMITS_CLASS = class_node(connection_limits, "ClientLimitsProtocol")
OWN_METHODS = {n.name for n in LIMITS_CLASS.body if isinstance(n, ast.FunctionDef)}
ON_SELF = attributes_read_on(LIMITS_CLASS, is_self)
OWN_STATE = {
    n.attr
    for n in ast.walk(LIMITS_CLASS)
    if isinstance(n, ast.Attribute)
    and is_self(n.value)
    and isinstance(n.ctx, ast.Store)
    and n.attr.startswith("_")
}
# uvicorn's: every public name read on self that the subclass does not define as a method,
# and any private one it does not set itself (none today: it would be uvicorn's privates).
UVICORN_ON_SELF = sorted(
    a for a in ON_SELF - OWN_METHODS if not a.startswith("_") or a not in OWN_STATE
)
OWN_ON_SELF = sorted(OWN_STATE)
OVERRIDDEN = sorted(m for m in OWN_METHODS if not m.startswith("_"))
ON_CYCLE = sorted(attributes_read_on(LIMITS_CLASS, is_cycle))
ON_SERVER_STATE = sorted(attributes_read_on(LIMITS_CLASS, is_server_state))


def test_the_proxy_code_is_read_as_expected() -> None:
    # The lists the checks below go through come from connection_limits.py itself, so a new
    # use of uvicorn's state is checked without editing this file; this keeps the reading
    # honest (an empty list would check nothing).
    assert {"cycle", "transport", "loop", "connections", "timeout_keep_alive_task"} <= set(
        UVICORN_ON_SELF
    )
    assert {"connection_made", "data_received", "on_response_complete"} <= set(OVERRIDDEN)
    assert {"response_complete", "more_body", "keep_alive"} <= set(ON_CYCLE)
    assert ON_SERVER_STATE == ["default_headers"]
    assert "_deadline" in OWN_ON_SELF


# ── uvicorn: HttpToolsProtocol, driven on a fake transport ──────────────────


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def answer_at_once(scope: Any, receive: Any, send: Any) -> None:
    """Answers without reading the body, as the proxy's 401/405/413 do."""
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def base_protocol(
    protocol: type[HttpToolsProtocol] = HttpToolsProtocol,
) -> tuple[HttpToolsProtocol, uvicorn.server.ServerState, FakeTransport]:
    config = uvicorn.Config(answer_at_once, log_config=None, lifespan="off", proxy_headers=False)
    state = uvicorn.server.ServerState()
    made = protocol(config, state, {}, asyncio.get_running_loop())
    transport = FakeTransport()
    made.connection_made(transport)
    return made, state, transport


async def answered(made: HttpToolsProtocol) -> None:
    """Until the app's task has sent its whole answer."""
    for _ in range(100):
        if made.cycle is not None and made.cycle.response_complete:
            return
        await asyncio.sleep(0)
    raise AssertionError("the app's answer never completed")


def test_the_constructor_takes_what_connection_limits_passes_on() -> None:
    parameters = list(inspect.signature(HttpToolsProtocol.__init__).parameters)
    assert parameters == ["self", "config", "server_state", "app_state", "_loop"], (
        f"uvicorn's HttpToolsProtocol.__init__ now takes {parameters}; "
        f"{LIMITS} calls super().__init__(config, server_state, app_state, _loop)"
    )


@pytest.mark.parametrize("method", OVERRIDDEN)
def test_every_overridden_method_is_still_uvicorns(method: str) -> None:
    # An override of a method uvicorn renamed or dropped is never called: the limit it adds
    # would silently stop applying.
    base = getattr(HttpToolsProtocol, method, None)
    assert callable(base), (
        f"uvicorn's HttpToolsProtocol has no {method}() any more; {LIMITS} overrides it"
    )
    ours = list(inspect.signature(getattr(ClientLimitsProtocol, method)).parameters)
    theirs = list(inspect.signature(base).parameters)
    assert ours == theirs, f"HttpToolsProtocol.{method}{theirs} now, {LIMITS} overrides {ours}"


async def test_every_attribute_read_is_still_set_by_uvicorn() -> None:
    made, _, _ = base_protocol()
    missing = [a for a in UVICORN_ON_SELF if not hasattr(made, a)]
    assert not missing, f"uvicorn's HttpToolsProtocol no longer has {missing}; {LIMITS} uses them"
    made.connection_lost(None)


async def test_no_name_of_the_subclass_shadows_one_of_uvicorns() -> None:
    # The subclass's own state is private (`_deadline`, ...); uvicorn using the same name for
    # its own state would make both wrong, with no error.
    made, _, _ = base_protocol()
    theirs = set(dir(HttpToolsProtocol)) | set(vars(made))
    clashes = sorted(
        theirs
        & (
            set(OWN_ON_SELF)
            | {m for m in OWN_METHODS if m.startswith("_") and not m.startswith("__")}
        )
    )
    assert not clashes, f"uvicorn's HttpToolsProtocol now has {clashes}, which {LIMITS} defines"
    made.connection_lost(None)


async def test_the_connection_set_is_the_servers() -> None:
    # The connection cap counts `self.connections` right after super().connection_made().
    made, state, _ = base_protocol()
    assert made.connections is state.connections and made in state.connections, (
        "HttpToolsProtocol.connection_made no longer adds the protocol to the server's "
        f"connections; {LIMITS}'s connection cap counts them"
    )
    made.connection_lost(None)
    assert made not in state.connections


async def test_uvicorn_logs_through_the_logger_the_subclass_replaces() -> None:
    made, _, transport = base_protocol()
    messages: list[object] = []

    class Kept(logging.Logger):
        """Keeps its warnings whatever other tests did to logging's levels."""

        def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
            messages.append(msg)

    made.logger = Kept("tests.uvicorn_internals")
    made.data_received(b"\x00 not http\r\n\r\n")
    assert messages and transport.written.startswith(b"HTTP/1.1 400"), (
        "a malformed request no longer goes through HttpToolsProtocol.logger and a 400; "
        f"{LIMITS} replaces that logger so uvicorn's warnings are the proxy's"
    )


async def test_the_parser_calls_the_callbacks_the_subclass_overrides() -> None:
    calls: list[str] = []

    class Spy(HttpToolsProtocol):
        def on_message_begin(self) -> None:
            calls.append("on_message_begin")
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            calls.append("on_headers_complete")
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            calls.append("on_message_complete")
            super().on_message_complete()

        def on_response_complete(self) -> None:
            calls.append("on_response_complete")
            super().on_response_complete()

    made, _, _ = base_protocol(Spy)
    made.data_received(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    await answered(made)
    expected = ["on_message_begin", "on_headers_complete", "on_message_complete"]
    assert calls == [*expected, "on_response_complete"], (
        f"httptools and uvicorn now call {calls} for one request; {LIMITS} times the head "
        f"and the drain from {expected} and on_response_complete"
    )
    made.connection_lost(None)


async def test_the_cycle_says_whether_the_body_is_still_coming() -> None:
    # The drain deadline starts when a response completed with `cycle.more_body` still set.
    made, _, transport = base_protocol()
    made.data_received(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n123")
    cycle = made.cycle
    assert isinstance(cycle, RequestResponseCycle), (
        f"HttpToolsProtocol.cycle is now {type(cycle).__name__}; {LIMITS} reads it"
    )
    missing = [a for a in ON_CYCLE if not hasattr(cycle, a)]
    assert not missing, (
        f"uvicorn's RequestResponseCycle no longer has {missing}; {LIMITS} reads them"
    )
    assert cycle.keep_alive is True and cycle.more_body is True
    await answered(made)
    assert cycle.response_complete is True and cycle.more_body is True, (
        "after an answer sent before the body ended, the cycle no longer reads "
        "response_complete=True, more_body=True; that is when "
        f"{LIMITS} starts its drain deadline"
    )
    assert transport.written.startswith(b"HTTP/1.1 204")
    made.connection_lost(None)


async def test_the_keep_alive_timer_is_armed_and_cancelled_as_the_subclass_expects() -> None:
    # After a drain the subclass arms uvicorn's keep-alive timer itself, as uvicorn does
    # after a response: through timeout_keep_alive_task, timeout_keep_alive and
    # timeout_keep_alive_handler; every received byte cancels it.
    made, _, transport = base_protocol()
    made.data_received(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    await answered(made)
    timer = made.timeout_keep_alive_task
    assert isinstance(timer, asyncio.TimerHandle), (
        "HttpToolsProtocol.on_response_complete no longer arms timeout_keep_alive_task with "
        f"loop.call_later; {LIMITS} re-arms it the same way after a drain"
    )
    assert isinstance(made.timeout_keep_alive, int | float)
    made.data_received(b"G")
    assert made.timeout_keep_alive_task is None and timer.cancelled(), (
        "HttpToolsProtocol.data_received no longer cancels and clears timeout_keep_alive_task; "
        f"{LIMITS} arms it anew only when it is None"
    )
    made.timeout_keep_alive_handler()
    assert transport.closed, "HttpToolsProtocol.timeout_keep_alive_handler no longer closes"
    made.connection_lost(None)


async def test_the_default_headers_are_name_value_pairs() -> None:
    # The 503/431/408 the subclass writes itself carry uvicorn's date and server headers.
    made, state, _ = base_protocol()
    assert made.server_state is state
    headers = state.default_headers
    assert isinstance(headers, list), (
        f"ServerState.default_headers is now {type(headers).__name__}; {LIMITS} writes it out"
    )
    config = uvicorn.Config(answer_at_once, log_config=None, headers=[("x-a", "1")])
    config.load()
    pairs = config.encoded_headers
    assert (b"x-a", b"1") in pairs and all(
        isinstance(name, bytes) and isinstance(value, bytes) for name, value in pairs
    ), (
        "uvicorn's headers are no longer (bytes, bytes) pairs; "
        f"{LIMITS} joins them as name + b': ' + value"
    )
    made.connection_lost(None)


# ── uvicorn: what serving.py takes from uvicorn.run ─────────────────────────


def test_serving_runs_a_config_as_uvicorn_run_does() -> None:
    where = "proxy/server/serving.py's run(), which does what uvicorn.run does"
    assert uvicorn.config.STARTUP_FAILURE == 3, f"uvicorn's STARTUP_FAILURE moved; {where}"
    parameters = list(inspect.signature(uvicorn.supervisors.Multiprocess).parameters)
    assert parameters[:2] == ["config", "sockets"], (
        f"uvicorn.supervisors.Multiprocess takes {parameters} now; {where}"
    )
    assert callable(getattr(uvicorn.Config, "bind_socket", None)), f"Config.bind_socket: {where}"
    server = uvicorn.Server(uvicorn.Config(answer_at_once))
    assert server.started is False, f"uvicorn.Server.started: {where}"
    # uvicorn.run itself still goes through the same three (nothing else it does is skipped).
    source = inspect.getsource(uvicorn.run)
    for name in ("Multiprocess(", "bind_socket()", "server.started", "STARTUP_FAILURE"):
        assert name in source, f"uvicorn.run no longer uses {name}; {where}"


# ── starlette ───────────────────────────────────────────────────────────────


def assigned_on_self(function: Callable[..., Any]) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {
        target.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Attribute) and is_self(target.value)
    }


def test_streamed_response_sets_what_starlettes_streaming_response_sets() -> None:
    # StreamedResponse skips Response.__init__ as StreamingResponse does: whatever state
    # StreamingResponse gives itself, StreamedResponse must give itself too.
    theirs = assigned_on_self(starlette.responses.StreamingResponse.__init__) | {"raw_headers"}
    ours = assigned_on_self(StreamedResponse.__init__)
    missing = sorted(theirs - ours)
    assert not missing, (
        f"starlette's StreamingResponse.__init__ now sets {missing}; "
        f"{streamed_response.__name__}.StreamedResponse.__init__ does not"
    )


async def body() -> Any:
    yield b""


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (None, [(b"content-type", b"text/event-stream; charset=utf-8")]),
        ({"X-A": "1"}, [(b"x-a", b"1"), (b"content-type", b"text/event-stream; charset=utf-8")]),
    ],
)
def test_init_headers_works_on_a_response_without_a_body(
    headers: dict[str, str] | None, expected: list[tuple[bytes, bytes]]
) -> None:
    init = starlette.responses.Response.init_headers
    assert list(inspect.signature(init).parameters) == ["self", "headers"], (
        "starlette's Response.init_headers changed its parameters; StreamedResponse calls it"
    )
    response = StreamedResponse(body(), headers=headers, media_type="text/event-stream")
    assert response.raw_headers == expected, (
        "starlette's Response.init_headers no longer gives a body-less response its content "
        "type and no length; StreamedResponse relies on it"
    )
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"


def test_the_hot_path_does_what_starlette_does_before_its_middleware() -> None:
    # StreamfixApp._hot skips Starlette.__call__ for the chat route, and so must repeat
    # everything it sets up in the scope (today: scope["app"]).
    tree = ast.parse(textwrap.dedent(inspect.getsource(starlette.applications.Starlette.__call__)))
    keys = sorted(
        ast.literal_eval(target.slice)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Name)
        and target.value.id == "scope"
    )
    assert keys == ["app"], (
        f"Starlette.__call__ now sets scope{keys}; {asgi.__name__}.StreamfixApp.__call__ "
        'sets only scope["app"] before its hot path'
    )
    theirs = set(vars(starlette.applications.Starlette())) | set(
        dir(starlette.applications.Starlette)
    )
    ours = assigned_on_self(asgi.StreamfixApp.__init__) | set(vars(asgi.StreamfixApp))
    clashes = sorted(
        theirs & {name for name in ours if name.startswith("_") and not name.startswith("__")}
    )
    assert not clashes, f"Starlette now has {clashes}, which StreamfixApp defines for itself"
