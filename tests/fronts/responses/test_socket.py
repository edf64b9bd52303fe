"""The Responses door over a WebSocket, as Codex CLI speaks it (`supports_websockets = true`):
a real proxy under uvicorn, the `websockets` client, the transcript fake as the upstream. Each
`response.create` is one exchange on the runner; its events come back one JSON text frame
each, a refusal as Codex's `error` frame with the HTTP status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from proxy.server.door_socket import DoorSocket
from tests.fronts.responses.codex import run_codex
from tests.fronts.responses.test_codex import SCRIPT, assert_two_turns
from tests.support.fake_upstream import (
    GEMINI_SIGNATURE_MESSAGE,
    FakeUpstream,
    load_transcript,
    running_fake_upstream,
)
from tests.support.proxies import running_proxy
from tests.support.signature_flows import MODEL, gemini_behind_proxy
from tests.support.waiting import wait_until

SOCKET = "model_providers.sf.supports_websockets=true"
TEXT = "openai_text_usage_only_last_chunk"
CALLS = "gemini_indexless_fragmented_single"
SEARCH = {
    "type": "function",
    "name": "search_web",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["query"],
    },
}


@contextmanager
def socket_stack(
    proxy_config: dict[str, Any] | None = None, **knobs: Any
) -> Iterator[tuple[FakeUpstream, str]]:
    """(the fake upstream, the proxy's `ws://…/v1/responses`)."""
    with (
        running_fake_upstream(**knobs) as (fake, root),
        running_proxy(f"{root}/v1", **(proxy_config or {})) as proxy,
    ):
        yield fake, proxy.replace("http://", "ws://") + "/v1/responses"


def create(ws: ClientConnection, **fields: Any) -> None:
    ws.send(json.dumps({"type": "response.create", "input": "go", **fields}))


def events_until_done(ws: ClientConnection) -> list[dict[str, Any]]:
    """Frames up to `response.completed` or an `error` frame, each one event."""
    events: list[dict[str, Any]] = []
    while True:
        frame = ws.recv(timeout=20)
        assert isinstance(frame, str)
        event = json.loads(frame)  # one whole JSON event per frame, no SSE framing
        events.append(event)
        if event["type"] in ("response.completed", "response.failed", "error"):
            return events


def completed(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert events[-1]["type"] == "response.completed", events
    response: dict[str, Any] = events[-1]["response"]
    return response


def test_a_text_answer_arrives_as_one_event_per_frame() -> None:
    with socket_stack() as (fake, url), connect(url) as ws:
        create(ws, model=TEXT)
        events = events_until_done(ws)
    expected = load_transcript(TEXT).meta["expect"]["choices"][0]["content"]
    assert events[0]["type"] == "response.created"
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == expected
    text = [p["text"] for i in completed(events)["output"] for p in i.get("content", [])]
    assert text == [expected]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert fake.requests[-1].json["stream"] is True


def test_gemini_indexless_calls_arrive_repaired() -> None:
    with socket_stack() as (_, url), connect(url) as ws:
        create(ws, model=CALLS, tools=[SEARCH])
        events = events_until_done(ws)
    calls = [i for i in completed(events)["output"] if i["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("search_web", {"query": "weather in Sydney", "days": 3})
    ]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["call_id"] for i in done if i["type"] == "function_call"] == [calls[0]["call_id"]]


def test_two_responses_in_sequence_on_one_socket_with_an_incremental_follow_up() -> None:
    """Codex's second request names the first (`previous_response_id`, `store: false`) and
    sends only the new items; the upstream gets the whole history: the call, then its output."""
    with socket_stack() as (fake, url), connect(url) as ws:
        create(ws, model=CALLS, tools=[SEARCH], store=False)
        first = completed(events_until_done(ws))
        call = next(i for i in first["output"] if i["type"] == "function_call")
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
        create(
            ws,
            model=TEXT,
            tools=[SEARCH],
            store=False,
            previous_response_id=first["id"],
            input=[output],
        )
        second = completed(events_until_done(ws))
    assert second["id"] != first["id"]
    assert len(fake.requests) == 2
    messages = fake.requests[1].json["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[0]["content"] == "go"
    assert messages[1]["tool_calls"][0]["id"] == call["call_id"]
    assert messages[2] == {"role": "tool", "tool_call_id": call["call_id"], "content": "sunny"}


def test_an_upstream_refusal_is_codex_s_error_frame_and_the_socket_goes_on() -> None:
    with socket_stack() as (fake, url), connect(url) as ws:
        create(ws, model="error_gemini_array")
        events = events_until_done(ws)
        assert len(events) == 1, events  # nothing before it: Codex reads the status first
        error = events[0]
        assert error["type"] == "error"
        assert error["status"] == 400  # Codex maps it to the HTTP 400: not retried
        assert error["error"]["message"] == GEMINI_SIGNATURE_MESSAGE
        assert "x-streamfix-repairs" in error["headers"]
        create(ws, model=TEXT)
        assert completed(events_until_done(ws))["status"] == "completed"
    assert len(fake.requests) == 2  # the refusal was not resent


def test_closing_the_socket_mid_stream_ends_the_upstream_request() -> None:
    with socket_stack(stall_after=3) as (fake, url):
        with connect(url) as ws:
            create(ws, model=TEXT)
            assert json.loads(ws.recv(timeout=20))["type"] == "response.created"
            wait_until(lambda: fake.open_streams == 1, "the upstream stream open")
        wait_until(lambda: fake.open_streams == 0, "the upstream request ended", 5)


def test_the_proxy_key_is_required_at_the_upgrade(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMFIX_API_KEYS", "sk-proxy")
    with socket_stack() as (fake, url):
        with pytest.raises(InvalidStatus) as refused:
            connect(url, additional_headers={"authorization": "Bearer sk-wrong"})
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
        with connect(url, additional_headers={"authorization": "Bearer sk-proxy"}) as ws:
            create(ws, model=TEXT)
            assert completed(events_until_done(ws))["status"] == "completed"
    assert len(fake.requests) == 1


def test_a_message_past_the_body_limit_is_refused_and_the_socket_goes_on() -> None:
    with socket_stack({"server.max_request_bytes": 1024}) as (fake, url), connect(url) as ws:
        create(ws, model=TEXT, input="x" * 2048)
        error = events_until_done(ws)[-1]
        assert (error["type"], error["status"]) == ("error", 413)
        assert error["error"]["code"] == "request_too_large"
        create(ws, model=TEXT)
        assert completed(events_until_done(ws))["status"] == "completed"
    assert len(fake.requests) == 1


def test_unknown_messages_are_refused_and_acknowledgements_ignored() -> None:
    with socket_stack() as (fake, url), connect(url) as ws:
        ws.send(json.dumps({"type": "response.processed", "response_id": "resp_x"}))
        ws.send(json.dumps({"type": "session.update"}))
        error = json.loads(ws.recv(timeout=20))
        assert (error["type"], error["status"]) == ("error", 400)
        assert "response.create" in error["error"]["message"]
        ws.send("not json")
        assert json.loads(ws.recv(timeout=20))["error"]["code"] == "invalid_json"
    assert fake.requests == []


def test_codex_s_prewarm_is_answered_without_the_upstream() -> None:
    with socket_stack() as (fake, url), connect(url) as ws:
        create(ws, model=TEXT, generate=False)
        warm = completed(events_until_done(ws))
        assert (warm["status"], warm["output"]) == ("completed", [])
        create(ws, model=TEXT, previous_response_id=warm["id"], input=[])
        assert completed(events_until_done(ws))["status"] == "completed"
    assert len(fake.requests) == 1
    assert [m["content"] for m in fake.requests[0].json["messages"]] == ["go"]


def test_codex_over_the_socket_runs_a_shell_command_on_gemini(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Codex CLI itself, offline, with `supports_websockets = true`: its prewarm, the turn, and
    the follow-up naming the turn (only the command's output sent) on the socket."""
    messages: list[dict[str, Any]] = []
    request = DoorSocket._request

    def seen(socket: DoorSocket, message: dict[str, Any]) -> dict[str, Any]:
        messages.append(message)
        return request(socket, message)

    monkeypatch.setattr(DoorSocket, "_request", seen)
    with gemini_behind_proxy(list(SCRIPT)) as (fake, _, proxy):
        events = run_codex(proxy, MODEL, "run the echo command", config=(SOCKET,))
        assert_two_turns(events, fake)
        assert len(fake.requests) == 2  # the prewarm did not go upstream
    assert [m.get("generate") for m in messages] == [False, None, None]
    follow_up = messages[-1]
    assert follow_up["previous_response_id"]
    assert [i["type"] for i in follow_up["input"]] == ["function_call_output"]
