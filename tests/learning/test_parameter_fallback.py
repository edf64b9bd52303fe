"""What a 400/422 body names, read from the real bodies upstreams send, and how long the proxy
remembers it (proxy/learning/parameter_fallback.py)."""

from __future__ import annotations

import gzip

import httpx
import orjson
import pytest

from proxy.learning.parameter_fallback import (
    MAX_ERROR_BYTES,
    ParameterMemory,
    named_parameters,
    read_rejection,
    rejected_parameters,
)
from proxy.store.memory_store import MemoryStore
from tests.support.rejecting_upstream import (
    cerebras_value_unsupported,
    gemini_unknown_name,
    groq_unsupported,
    mistral_extra_forbidden,
    openai_unknown_parameter,
)

REQUEST = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "store": True,
    "frequency_penalty": 0.0,
    "parallel_tool_calls": False,
    "max_completion_tokens": 8,
}


def text(body: bytes) -> str:
    return body.decode()


@pytest.mark.parametrize(
    ("body", "name"),
    [
        (gemini_unknown_name("store")[1], "store"),
        (mistral_extra_forbidden("max_completion_tokens", 8)[1], "max_completion_tokens"),
        (groq_unsupported("store", "stop")[1], "store"),
        (openai_unknown_parameter("store")[1], "store"),
        (cerebras_value_unsupported("parallel_tool_calls", False)[1], "parallel_tool_calls"),
        # Mistral's older body: the detail JSON-encoded inside `message`
        # (mistralai/platform-docs-public#7).
        (
            b'{"object":"error","message":"{\\"detail\\":[{\\"type\\":\\"extra_forbidden\\",'
            b'\\"loc\\":[\\"body\\",\\"frequency_penalty\\"],\\"msg\\":\\"Extra inputs are not '
            b'permitted\\",\\"input\\":0.0}]}","type":"internal_error_proxy","param":null,'
            b'"code":"1000"}',
            "frequency_penalty",
        ),
        (
            b'{"error":{"message":"Unrecognized request argument supplied: store"}}',
            "store",
        ),
        (
            b'{"error":{"message":"deepseek-reasoner does not support the parameter '
            b'`frequency_penalty`","type":"invalid_request_error"}}',
            "frequency_penalty",
        ),
        (
            b'{"code":"Client specified an invalid argument","error":"Argument not supported '
            b'on this model: frequencyPenalty"}',
            "frequency_penalty",
        ),
    ],
)
def test_each_upstreams_phrasing_names_the_parameter(body: bytes, name: str) -> None:
    assert rejected_parameters(text(body), REQUEST) == [name]


def test_a_name_inside_the_request_is_not_a_parameter() -> None:
    # Gemini naming a schema keyword inside a tool, Mistral a field inside a message.
    gemini = (
        'Invalid JSON payload received. Unknown name "store" at '
        "'tools[0].function_declarations[34].parameters': Cannot find field."
    )
    mistral = (
        '{"detail":[{"type":"extra_forbidden","loc":["body","messages",2,"assistant",'
        '"tool_calls",0,"store"],"msg":"Extra inputs are not permitted","input":null}]}'
    )
    assert rejected_parameters(gemini, REQUEST) == []
    assert rejected_parameters(mistral, REQUEST) == []
    # Gemini's `at` its own name is top level (MinLL/SkyrimNet-GamePlugin#77).
    own = "Unknown name \"store\" at 'store': Cannot find field."
    assert rejected_parameters(own, REQUEST) == ["store"]


def test_a_loc_without_the_extra_forbidden_words_names_nothing() -> None:
    missing = '{"detail":[{"type":"missing","loc":["body","store"],"msg":"Field required"}]}'
    assert named_parameters(missing) == set()


def test_a_protected_name_anywhere_in_the_error_stops_the_retry() -> None:
    detail = [
        {"type": "extra_forbidden", "loc": ["body", n], "msg": "Extra inputs are not permitted"}
        for n in ("store", "messages")
    ]
    assert rejected_parameters(orjson.dumps({"detail": detail}).decode(), REQUEST) == []


def test_an_error_that_names_no_parameter_names_nothing() -> None:
    body = '[{"error":{"code":400,"message":"Parallel tool calls are not supported."}}]'
    assert rejected_parameters(body, REQUEST) == []


async def test_the_memory_forgets_after_its_ttl_and_is_bounded() -> None:
    now = [0.0]
    memory = ParameterMemory(MemoryStore(2, 10.0, clock=lambda: now[0]), 10.0)
    memory.remember("up", "m", ["store", "user"], 400)
    assert await memory.recall("up", {"model": "m", "store": 1, "user": 2}) == {"store", "user"}
    # Another model, another upstream: not theirs.
    assert await memory.recall("up", {"model": "n", "store": 1}) == frozenset()
    assert await memory.recall("other", {"model": "m", "store": 1}) == frozenset()
    memory.remember("up", "m", ["metadata"], 400)  # a third entry: the oldest goes
    assert await memory.recall("up", {"model": "m", "store": 1, "metadata": 1}) == {"metadata"}
    now[0] = 11.0
    assert await memory.recall("up", {"model": "m", "metadata": 1}) == frozenset()


async def test_a_gzipped_rejection_is_read_and_still_relayed_whole() -> None:
    _, body = gemini_unknown_name("store")
    packed = gzip.compress(body)
    response = httpx.Response(
        400,
        headers={"content-encoding": "gzip"},
        stream=httpx.ByteStream(packed),
        request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"),
    )
    replay, names = await read_rejection(response, REQUEST)
    assert names == ["store"]
    assert b"".join([piece async for piece in replay.aiter_raw()]) == packed


async def test_a_rejection_larger_than_the_bound_is_relayed_unread() -> None:
    _, body = gemini_unknown_name("store")
    pieces = [body, b" " * (MAX_ERROR_BYTES + 1), b"tail"]

    class Pieces(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[override]
            for piece in pieces:
                yield piece

    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(400, stream=Pieces(), request=request)
    replay, names = await read_rejection(response, REQUEST)
    assert names == []
    assert b"".join([piece async for piece in replay.aiter_raw()]) == b"".join(pieces)
