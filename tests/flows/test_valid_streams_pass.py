"""A valid stream passes exactly as it came (issue 26, part 2): OpenAI's own stream shapes (text,
one call, parallel calls, usage) reach the client through the real proxy byte for byte as they
reach it directly, under the default `tool_calls.emit = "auto"`, and a call's argument fragments
go on as they arrive instead of once the call is whole.

Before, the default ("atomic") held every call until its finish and sent it in one delta: a
client showing a file being written saw nothing until the end.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

from tests.support.openai_streams import (
    WEATHER_TOOL,
    WRITE_TOOL,
    call_stream,
    fragments_of,
    text_stream,
)
from tests.support.proxies import running_proxy
from tests.support.raw_upstream import RawRequest, Reply, chunked, raw_upstream

TIMEOUT = httpx.Timeout(10.0)
TOOLS = [WEATHER_TOOL, WRITE_TOOL]
CONTENT = "line of a file being written\n" * 40

SHAPES = {
    "text": text_stream(["The", " weather", " is", " fine."]),
    "text_with_usage": text_stream(["Hi", "!"], usage=True),
    "one_call": call_stream([("call_Qm1", "get_weather", ['{"', "city", '":"', "Paris", '"}'])]),
    "one_call_with_usage": call_stream(
        [("call_Qm2", "get_weather", ['{"city":', '"Oslo"}'])], usage=True
    ),
    "parallel_calls": call_stream(
        [
            ("call_P1", "get_weather", ['{"city":', ' "Paris"}']),
            ("call_P2", "get_weather", ['{"city":', ' "Tokyo"}']),
        ]
    ),
    "parallel_calls_with_usage": call_stream(
        [
            ("call_U1", "get_weather", ['{"city": "Rome"}']),
            ("call_U2", "write_file", ['{"path": "a.txt", ', '"content": "b"}']),
        ],
        usage=True,
    ),
    "long_call": call_stream(
        [("call_L1", "write_file", fragments_of(f'{{"path": "n.md", "content": "{CONTENT}"}}', 5))]
    ),
}


def events(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


def upstream_of(body: bytes, pause: float = 0.0) -> Any:
    def reply(request: RawRequest) -> Reply:
        return Reply(pieces=chunked("text/event-stream", events(body)), pause=pause)

    return reply


def request_body(stream_options: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-4.1",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": TOOLS,
        "stream": True,
    }
    if stream_options:
        body["stream_options"] = {"include_usage": True}
    return body


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_openai_shaped_streams_cross_the_proxy_byte_for_byte(name: str) -> None:
    body = SHAPES[name]
    with raw_upstream(upstream_of(body)) as upstream, running_proxy(f"{upstream.url}/v1") as proxy:
        direct = httpx.post(
            f"{upstream.url}/v1/chat/completions", json=request_body(), timeout=TIMEOUT
        )
        proxied = httpx.post(f"{proxy}/v1/chat/completions", json=request_body(), timeout=TIMEOUT)
    assert direct.content == body
    assert proxied.status_code == 200
    assert proxied.content == direct.content


@pytest.mark.parametrize("name", ["one_call_with_usage", "parallel_calls", "long_call"])
def test_the_openai_sdk_gets_the_same_chunks_through_the_proxy(name: str) -> None:
    body = SHAPES[name]

    def chunks(base_url: str) -> list[dict[str, Any]]:
        client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
        stream = client.chat.completions.create(
            model="gpt-4.1",
            messages=[{"role": "user", "content": "go"}],
            tools=TOOLS,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        return [chunk.model_dump() for chunk in stream]

    with raw_upstream(upstream_of(body)) as upstream, running_proxy(f"{upstream.url}/v1") as proxy:
        assert chunks(f"{proxy}/v1") == chunks(f"{upstream.url}/v1")


def test_argument_fragments_reach_the_client_while_the_call_streams() -> None:
    # Each upstream event is followed by a pause: the first argument fragment must reach the
    # client long before the call's last one is even sent.
    body = SHAPES["one_call"]
    pause = 0.15
    first_fragment = b'"function":{"arguments":"{\\""}'
    with (
        raw_upstream(upstream_of(body, pause=pause)) as upstream,
        running_proxy(f"{upstream.url}/v1") as proxy,
        httpx.Client(timeout=TIMEOUT) as client,
    ):
        started = time.monotonic()
        seen = b""
        arrived = None
        with client.stream("POST", f"{proxy}/v1/chat/completions", json=request_body()) as response:
            for data in response.iter_raw():
                seen += data
                if arrived is None and first_fragment in seen:
                    arrived = time.monotonic() - started
        total = time.monotonic() - started
    assert seen == body
    assert arrived is not None
    # Six more events (four fragments, the finish, [DONE]) follow it, a pause after each:
    # held until the call is whole, it would arrive with the finish, near the end.
    assert arrived < total - 4 * pause
