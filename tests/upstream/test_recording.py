"""Record and replay (proxy/upstream/recording.py, cassettes.py) under a real uvicorn, with real
clients.

- Round trip: the OpenAI Python SDK (`create(stream=True)`, `chat.completions.stream()`), raw
  httpx and the Vercel AI SDK against a recording proxy in front of the fake upstream, then the
  same against a replaying proxy with the fake gone: byte-identical bodies, equal results, a
  two-turn conversation (and a Vercel agent loop) matched turn by turn.
- No credential reaches a cassette; chunk boundaries are recorded and replayed exactly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from proxy.repair.conformance import violations
from proxy.upstream.cassettes import Cassette
from proxy.upstream.recording import ReplayTransport
from tests.clients.vercel import run_vercel, run_vercel_agent
from tests.support.fake_upstream import (
    load_transcript,
    running_fake_upstream,
    split_inside_characters,
    split_inside_json,
)
from tests.support.proxies import running_proxy
from tests.support.recording_clients import (
    RECORDINGS,
    USER,
    raw_stream,
    sdk,
    sdk_create,
    sdk_fields,
    sdk_stream,
    upstream_bytes,
)
from tests.support.waiting import wait_until

# ── record, then replay, through real clients ────────────────────────────────

# Transcripts read through raw httpx, `create(stream=True)` and `.stream()`.
ROUND_TRIP = [
    "gemini_signature_only_delta",
    "vllm_gemma4_missing_id_name",
    "openai_n2_choices",
    "keepalive_comments",
]
VERCEL_ROUND_TRIP = [
    (sdk, name)
    for sdk in ("v2", "v3")  # v2: what opencode bundles
    for name in ("gemini_signature_only_delta", "vllm_gemma4_missing_id_name")
]


def vercel_tools(transcript: str) -> list[dict[str, Any]]:
    return [
        {
            "name": tool["function"]["name"],
            "description": tool["function"].get("description", ""),
            "parameters": tool["function"].get("parameters", {"type": "object"}),
        }
        for tool in load_transcript(transcript).meta["request"]["tools"]
    ]


CONVERSATION = ("gemini_indexless_call_stop", "gemini_text_thought_signature")
SIGNATURE = "EjQKMgG+Pvb7s6anNtqTZtb1XVK5Rf2edMXJQpVr53xZCQ3+7yiWdGctjmyn1GLanJ+jMP9P"


def conversation(proxy: str) -> dict[str, Any]:
    """Two turns with the OpenAI SDK: a Gemini call, then the follow-up carrying that call
    (rebuilt without its signature, as SDK users do) and its result; the proxy puts the
    signature back, so the second request upstream depends on what the first one taught it."""
    first = sdk(proxy).chat.completions.create(
        model=CONVERSATION[0], messages=USER, stream=True, **sdk_fields(CONVERSATION[0])
    )
    with first:
        chunks = list(first)
    [call] = [tc for chunk in chunks for c in chunk.choices for tc in c.delta.tool_calls or []]
    follow_up = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "package main\n"},
    ]
    second = sdk_create(proxy, CONVERSATION[1], follow_up)
    return {"turn 1": [c.model_dump() for c in chunks], "turn 2": second}


def every_client(proxy: str) -> dict[str, Any]:
    """Everything the clients saw, in a fixed order (replay matches turn by turn)."""
    seen: dict[str, Any] = {}
    for name in ROUND_TRIP:
        seen[f"{name} raw"] = raw_stream(proxy, name)
        seen[f"{name} create"] = sdk_create(proxy, name)
        seen[f"{name} stream"] = sdk_stream(proxy, name)
    seen["conversation"] = conversation(proxy)
    for version, name in VERCEL_ROUND_TRIP:
        seen[f"{name} vercel {version}"] = run_vercel(
            version, f"{proxy}/v1", name, vercel_tools(name)
        )
    seen["vercel agent"] = run_vercel_agent(
        "v2",
        f"{proxy}/v1",
        "gemini_parallel_one_per_chunk",
        vercel_tools("gemini_parallel_one_per_chunk"),
        execute={"get_weather": {"temperature": 21}},
        max_steps=2,
    )
    return seen


def test_record_then_replay_gives_clients_identical_output(tmp_path: Path) -> None:
    with running_fake_upstream() as (fake, fake_url):
        upstream = f"{fake_url}/v1"
        with running_proxy(upstream, **{"recording.record_dir": str(tmp_path)}) as proxy:
            live = every_client(proxy)
        sent_upstream = len(fake.requests)
    # The fake is gone; only the cassettes can answer now.
    with running_proxy(upstream, **{"recording.replay_dir": str(tmp_path)}) as proxy:
        replayed = every_client(proxy)
    assert len(fake.requests) == sent_upstream
    assert len(list(tmp_path.glob("*.json"))) == sent_upstream

    for key in live:
        assert replayed[key] == live[key], key

    # And what was recorded is the repaired answer, not an error relayed twice.
    for name in ROUND_TRIP:
        status, content_type, body = live[f"{name} raw"]
        assert status == 200 and content_type.startswith("text/event-stream")
        assert violations(body, "auto") == []  # the default emission
    for version, name in VERCEL_ROUND_TRIP:
        assert live[f"{name} vercel {version}"]["errors"] == []
    # The conversation's second turn went upstream with the first turn's signature put back.
    [turn_two] = [r.json for r in fake.requests if (r.json or {}).get("model") == CONVERSATION[1]]
    [call] = turn_two["messages"][1]["tool_calls"]
    assert call["extra_content"]["google"]["thought_signature"] == SIGNATURE
    agent = live["vercel agent"]
    assert agent["errors"] == [] and len(agent["steps"]) == 2
    assert [r["output"] for r in agent["steps"][0]["toolResults"]] == [{"temperature": 21}] * 2


# ── no credentials in cassettes ──────────────────────────────────────────────

SECRET_HEADERS = {
    "authorization": "Bearer sk-test-SECRET-123",
    "x-api-key": "xk-test-SECRET-456",
    "api-key": "ak-test-SECRET-654",
    "x-goog-api-key": "gk-test-SECRET-987",
    "cookie": "session=ck-test-SECRET-789; theme=dark",
    "X-Tenant-Token": "tt-test-SECRET-000",
}
SECRET_QUERY_VALUE = "qk-test-SECRET-321"


def test_cassettes_hold_no_credentials(tmp_path: Path) -> None:
    config = {"recording.record_dir": str(tmp_path), "recording.secret_headers": ["x-tenant-token"]}
    with (
        running_fake_upstream() as (fake, fake_url),
        running_proxy(f"{fake_url}/v1", **config) as proxy,
        httpx.Client(base_url=proxy, headers=SECRET_HEADERS, timeout=30) as client,
    ):
        query = {"key": SECRET_QUERY_VALUE, "alt": "sse"}
        stream = {"model": "gemini_indexless_call_stop", "messages": USER, "stream": True}
        with client.stream("POST", "/v1/chat/completions", params=query, json=stream) as resp:
            assert resp.status_code == 200
            resp.read()
        answer = {"model": "gemini_indexless_call_stop", "messages": USER}
        assert client.post("/v1/chat/completions", params=query, json=answer).status_code == 200
        refused = {"model": "error_openai_429", "messages": USER, "stream": True}
        assert client.post("/v1/chat/completions", params=query, json=refused).status_code == 429
        assert client.get("/v1/models", params=query).status_code == 200
        wait_until(lambda: len(list(tmp_path.glob("*.json"))) == 4, "4 cassettes", timeout=10.0)
        # The credentials did travel: the upstream got every one of them.
        arrived = fake.requests[-1]
        assert arrived.headers["authorization"] == SECRET_HEADERS["authorization"]
        assert arrived.headers["x-tenant-token"] == SECRET_HEADERS["X-Tenant-Token"]
        assert SECRET_QUERY_VALUE in arrived.query

    secrets = [*SECRET_HEADERS.values(), SECRET_QUERY_VALUE, "SECRET"]
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert len(files) == 4
    for path in files:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"{secret!r} in {path.name}"
        cassette = Cassette.load(path)
        assert not {"authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"} & set(
            cassette.request_headers
        )
        assert "x-tenant-token" not in cassette.request_headers
        assert cassette.query == "alt=sse"


# ── chunk boundaries ─────────────────────────────────────────────────────────


async def replayed_chunks(cassette: Cassette) -> list[bytes]:
    """What the replay transport streams for the cassette's own request, piece by piece."""
    base_url = "http://upstream.invalid/v1"
    transport = ReplayTransport([cassette], base_url)
    request = httpx.Request(
        cassette.method, f"{base_url}/{cassette.path}", content=cassette.request_body
    )
    response = await transport.handle_async_request(request)
    assert response.status_code == cassette.status
    return [bytes(piece) async for piece in response.stream]


@pytest.mark.parametrize(
    ("name", "transcript", "chunker"),
    [
        (
            "gemini_fragmented_parallel_split_mid_json",
            "gemini_indexless_fragmented_parallel",
            split_inside_json,
        ),
        (
            "openai_text_split_mid_utf8_character",
            "openai_text_multibyte_utf8",
            split_inside_characters,
        ),
    ],
)
def test_corpus_chunk_boundaries_replay_exactly(name: str, transcript: str, chunker: Any) -> None:
    cassette = Cassette.load(RECORDINGS / f"{name}.json")
    recorded = [chunk.data for chunk in cassette.chunks]
    # The recording holds the upstream's own cuts, inside JSON objects / characters...
    events = load_transcript(transcript).events
    assert recorded == [piece for event in events for piece in chunker(event)]
    assert any(not piece.endswith(b"\n\n") for piece in recorded)
    # ...and the replay transport streams exactly those pieces, not their concatenation.
    assert anyio.run(replayed_chunks, cassette) == recorded


def test_utf8_split_is_stored_as_base64_and_decodes_back() -> None:
    path = RECORDINGS / "openai_text_split_mid_utf8_character.json"
    stored = json.loads(path.read_text())["upstream"]["chunks"]
    assert any("base64" in chunk for chunk in stored)
    cassette = Cassette.load(path)
    assert upstream_bytes(cassette) == load_transcript("openai_text_multibyte_utf8").sse


def test_recording_keeps_the_upstream_chunk_boundaries(tmp_path: Path) -> None:
    transcript = "gemini_indexless_fragmented_single"
    with (
        running_fake_upstream(chunking=split_inside_json) as (fake, fake_url),
        running_proxy(f"{fake_url}/v1", **{"recording.record_dir": str(tmp_path)}) as proxy,
    ):
        status, _, body = raw_stream(proxy, transcript)
        assert status == 200 and violations(body) == []
        wait_until(lambda: len(list(tmp_path.glob("*.json"))) == 1, "1 cassette", timeout=10.0)
        sent = fake._pieces(load_transcript(transcript))
    [path] = tmp_path.glob("*.json")
    cassette = Cassette.load(path)
    assert [chunk.data for chunk in cassette.chunks] == sent
    assert anyio.run(replayed_chunks, cassette) == sent


def test_replay_through_a_plain_forwarding_proxy_gives_the_upstream_bytes(
    tmp_path: Path,
) -> None:
    shutil.copy(RECORDINGS / "gemini_fragmented_parallel_split_mid_json.json", tmp_path)
    cassette = Cassette.load(tmp_path / "gemini_fragmented_parallel_split_mid_json.json")
    config = {"recording.replay_dir": str(tmp_path), "repairs.enabled": False}
    with (
        running_proxy("http://127.0.0.1:9/v1", **config) as proxy,
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{proxy}/v1/chat/completions", content=cassette.request_body
        ) as resp,
    ):
        # Over a socket the pieces may coalesce; the bytes may not change.
        assert b"".join(resp.iter_raw()) == upstream_bytes(cassette)
