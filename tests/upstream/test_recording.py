"""Record and replay: the corpus in recordings/, and the proxy recording and replaying
under a real uvicorn, with real clients, and the `streamfix` command line as CI runs it.

- The corpus: `streamfix replay recordings` exits 0 with every cassette ok; every cassette made
  from a transcript carries the transcript's expected calls (so the corpus pins right answers,
  not just today's); the README lists every cassette.
- Round trip: the OpenAI Python SDK (`create(stream=True)`, `chat.completions.stream()`), raw
  httpx and the Vercel AI SDK against a recording proxy in front of the fake upstream, then the
  same against a replaying proxy with the fake gone: byte-identical bodies, equal results, a
  two-turn conversation (and a Vercel agent loop) matched turn by turn.
- No credential reaches a cassette; chunk boundaries are recorded and replayed exactly;
  `--replay-timing` keeps the recorded pacing; an unmatched request gets a 502 naming the
  nearest cassette and the differing field; `streamfix replay` fails on a changed repair or a
  violation, with a diff, and passes after `--update`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import orjson
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
    transcript_names,
    wire_transcript_names,
)
from tests.support.make_recordings import CASES
from tests.support.proxies import running_proxy
from tests.support.servers import free_port
from tests.support.streams import assembled_calls, content, finish_reasons

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "recordings"
CORPUS = sorted(RECORDINGS.glob("*.json"))

# The behaviours the corpus must hold, by cassette name.
REQUIRED = {
    "gemini_indexless_call_stop",
    "gemini_parallel_one_per_chunk",
    "gemini_signature_only_delta",
    "gemini_text_thought_signature",
    "vertex_jumping_index",
    "vllm_canonical_incremental",
    "vllm_gemma4_missing_id_name",
    "vllm_args_tail_under_next_index",
    "kimi_reused_ids_round1",
    "kimi_reused_ids_round2",
    "openai_indexed_parallel",
    "openai_text_usage_only_last_chunk",
    "openai_n2_choices",
    "keepalive_comments",
    "crlf_line_endings",
    "gemini_error_400_array",
    "openai_error_429_retry_after",
    "openai_error_500",
    "gemini_fragmented_parallel_split_mid_json",
}

GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")
API_KEY = "sk-test-round-trip"
USER = [{"role": "user", "content": "go"}]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m proxy ARGS` from the repository root, without any STREAMFIX_* environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def statuses(stdout: str) -> dict[str, str]:
    """`streamfix replay`'s verdict per cassette: {"name.json": "ok" | "CHANGED" | ...}."""
    found = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].endswith(".json"):
            found[parts[1]] = parts[0]
    return found


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


# ── the corpus ───────────────────────────────────────────────────────────────


def test_corpus_replays_clean_through_the_command_line() -> None:
    # How CI runs the corpus check.
    result = cli("replay", "recordings")
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert statuses(result.stdout) == {path.name: "ok" for path in CORPUS}, report
    assert f"{len(CORPUS)} cassettes, 0 with differences or violations" in result.stdout
    assert "VIOLATION" not in result.stdout


def test_corpus_holds_every_required_behaviour_and_the_readme_lists_each() -> None:
    names = {path.stem for path in CORPUS}
    assert names >= REQUIRED
    assert names == {case.name for case in CASES}, "recordings/ and make_recordings disagree"
    readme = (RECORDINGS / "README.md").read_text()
    for name in names:
        assert f"`{name}.json`" in readme
    assert "*not* captured" in readme and "fake upstream" in readme


def _transcript_cassettes() -> list[Any]:
    known = set(transcript_names()) | set(wire_transcript_names())
    cases = []
    for path in CORPUS:
        cassette = Cassette.load(path)
        body = cassette.body_json if isinstance(cassette.body_json, dict) else {}
        if cassette.status == 200 and body.get("stream") and body.get("model") in known:
            cases.append(pytest.param(path, body["model"], id=path.stem))
    return cases


@pytest.mark.parametrize(("path", "transcript"), _transcript_cassettes())
def test_recorded_client_output_is_the_transcripts_expected_answer(
    path: Path, transcript: str
) -> None:
    """The corpus check compares with what was recorded; this checks that what was recorded
    is right: the calls, text and finish reason of the transcript's `expect`."""
    out = Cassette.load(path).client_body
    assert violations(out) == []
    calls, text, reasons = assembled_calls(out), content(out), finish_reasons(out)
    for want in load_transcript(transcript).meta["expect"]["choices"]:
        index = want["index"]
        assert reasons.get(index) == [want["finish_reason"]]
        assert text.get(index, "") == want["content"]
        got = calls.get(index, [])
        assert [(c["name"], orjson.loads(c["arguments"])) for c in got] == [
            (c["name"], c["arguments"]) for c in want["tool_calls"]
        ]
        for call, expected in zip(got, want["tool_calls"], strict=True):
            if path.stem == "kimi_reused_ids_round2":
                continue  # renamed: see the next test
            if expected["id"] is None:
                assert GENERATED_ID.fullmatch(call["id"])
            else:
                assert call["id"] == expected["id"]
            google = (call["extra_content"] or {}).get("google") or {}
            assert google.get("thought_signature") == expected.get("thought_signature")


def test_kimi_round_two_cassette_shows_the_reused_ids_renamed() -> None:
    one = Cassette.load(RECORDINGS / "kimi_reused_ids_round1.json")
    two = Cassette.load(RECORDINGS / "kimi_reused_ids_round2.json")
    first_ids = [c["id"] for c in assembled_calls(one.client_body)[0]]
    assert first_ids == ["functions.search_web:0", "functions.read_file:1"]
    # Round two's request carries round one's calls and results...
    history = two.body_json["messages"]
    assert [c["id"] for c in history[1]["tool_calls"]] == first_ids
    assert [m["tool_call_id"] for m in history[2:]] == first_ids
    # ...the upstream numbered its calls from :0 again, the client got them renamed.
    upstream = b"".join(c.data for c in two.chunks)
    assert b'"id":"functions.search_web:0"' in upstream
    second_ids = [c["id"] for c in assembled_calls(two.client_body)[0]]
    assert second_ids == ["functions.search_web:2", "functions.read_file:3"]


def test_error_cassettes_keep_status_headers_and_body() -> None:
    gemini = Cassette.load(RECORDINGS / "gemini_error_400_array.json")
    assert gemini.status == 400 and isinstance(orjson.loads(gemini.client_body), list)
    limited = Cassette.load(RECORDINGS / "openai_error_429_retry_after.json")
    assert limited.status == 429 and limited.response_headers["retry-after"] == "3"
    assert orjson.loads(limited.client_body)["error"]["code"] == "rate_limit_exceeded"
    broken = Cassette.load(RECORDINGS / "openai_error_500.json")
    assert broken.status == 500
    for cassette in (gemini, limited, broken):
        assert cassette.client_body == cassette.upstream_body  # untouched


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


def sdk_fields(transcript: str) -> dict[str, Any]:
    """The transcript's request fields (tools, n, ...) as OpenAI SDK keyword arguments."""
    request = load_transcript(transcript).meta["request"]
    return {k: v for k, v in request.items() if v not in (None, [])}


def request_fields(transcript: str) -> dict[str, Any]:
    """The same fields as they appear in the request body."""
    fields = sdk_fields(transcript)
    return fields | fields.pop("extra_body", {})


def raw_stream(proxy: str, transcript: str) -> tuple[int, str, bytes]:
    body = {"model": transcript, "messages": USER, "stream": True, **request_fields(transcript)}
    headers = {"authorization": f"Bearer {API_KEY}"}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{proxy}/v1/chat/completions", json=body, headers=headers) as r,
    ):
        return r.status_code, r.headers["content-type"], b"".join(r.iter_raw())


def sdk(proxy: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy}/v1", api_key=API_KEY, max_retries=0, timeout=30)


def sdk_create(proxy: str, transcript: str, messages: list[dict[str, Any]] = USER) -> Any:
    stream = sdk(proxy).chat.completions.create(
        model=transcript, messages=messages, stream=True, **sdk_fields(transcript)
    )
    with stream:
        return [chunk.model_dump() for chunk in stream]


def sdk_stream(proxy: str, transcript: str) -> Any:
    with sdk(proxy).chat.completions.stream(
        model=transcript, messages=USER, **sdk_fields(transcript)
    ) as stream:
        events = [event.type for event in stream]
        return events, stream.get_final_completion().model_dump()


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
        assert violations(body) == []
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
        wait_for(lambda: len(list(tmp_path.glob("*.json"))) == 4)
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
    assert cassette.upstream_body == load_transcript("openai_text_multibyte_utf8").sse


def test_recording_keeps_the_upstream_chunk_boundaries(tmp_path: Path) -> None:
    transcript = "gemini_indexless_fragmented_single"
    with (
        running_fake_upstream(chunking=split_inside_json) as (fake, fake_url),
        running_proxy(f"{fake_url}/v1", **{"recording.record_dir": str(tmp_path)}) as proxy,
    ):
        status, _, body = raw_stream(proxy, transcript)
        assert status == 200 and violations(body) == []
        wait_for(lambda: len(list(tmp_path.glob("*.json"))) == 1)
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
        assert b"".join(resp.iter_raw()) == cassette.upstream_body


# ── --replay-timing, serve --record, through the command line ────────────────


@contextmanager
def serving(*args: str) -> Iterator[str]:
    """`python -m proxy serve ARGS` on a free loopback port; yields its root URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"streamfix serve exited: {process.stderr.read().decode()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("streamfix serve did not come up within 20 s")
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def timed_request(url: str, cassette: Cassette) -> tuple[float, bytes]:
    started = time.monotonic()
    response = httpx.post(f"{url}/v1/chat/completions", content=cassette.request_body, timeout=10)
    assert response.status_code == 200
    return time.monotonic() - started, response.content


def test_replay_timing_keeps_the_recorded_pace(tmp_path: Path) -> None:
    cassette = Cassette.load(RECORDINGS / "openai_no_done.json")
    for chunk in cassette.chunks:
        chunk.at = 0.0
    cassette.chunks[-1].at = 0.3  # the last event comes 0.3 s after the others
    cassette.save(tmp_path / "paced.json")
    with serving("--replay", str(tmp_path), "--replay-timing") as url:
        paced, body = timed_request(url, cassette)
    with serving("--replay", str(tmp_path)) as url:
        fast, same = timed_request(url, cassette)
    assert paced >= 0.25
    assert fast < 0.25
    assert body == same == cassette.client_body


def test_serve_record_writes_a_cassette_per_exchange(tmp_path: Path) -> None:
    with running_fake_upstream() as (_, fake_url):
        upstream = f"{fake_url}/v1"
        with serving("--upstream", upstream, "--record", str(tmp_path)) as url:
            status, _, body = raw_stream(url, "vertex_jumping_index")
            assert status == 200
            wait_for(lambda: len(list(tmp_path.glob("*.json"))) == 1)
    [path] = tmp_path.glob("*.json")
    assert path.name == "0001-vertex_jumping_index-stream-200.json"
    cassette = Cassette.load(path)
    assert cassette.client_body == body
    assert cassette.upstream_body == load_transcript("vertex_jumping_index").sse


# ── unmatched requests ───────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def corpus_proxy() -> Iterator[str]:
    """A proxy replaying recordings/; its upstream address answers nothing."""
    with running_proxy("http://127.0.0.1:9/v1", **{"recording.replay_dir": str(RECORDINGS)}) as p:
        yield p


def gemma4_request() -> dict[str, Any]:
    return Cassette.load(RECORDINGS / "vllm_gemma4_missing_id_name.json").body_json


def test_recorded_request_replays_and_volatile_fields_do_not_matter(corpus_proxy: str) -> None:
    body = gemma4_request() | {"user": "someone", "metadata": {"run": "42"}}
    response = httpx.post(f"{corpus_proxy}/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 200
    assert (
        response.content
        == Cassette.load(RECORDINGS / "vllm_gemma4_missing_id_name.json").client_body
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b["messages"][0].update(content="something else"), "body.messages[0].content"),
        (lambda b: b.update(tool_choice="required"), "body.tool_choice"),
        (lambda b: b["messages"].append({"role": "user", "content": "more"}), "body.messages[1]"),
    ],
    ids=["content", "tool_choice", "extra message"],
)
def test_unmatched_request_gets_a_502_naming_the_nearest_cassette_and_field(
    corpus_proxy: str, change: Any, field: str
) -> None:
    body = gemma4_request()
    change(body)
    response = httpx.post(f"{corpus_proxy}/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "replay_error" and error["code"] == "no_matching_cassette"
    assert "vllm_gemma4_missing_id_name.json" in error["message"]
    assert f"differs at {field}" in error["message"]


def test_unmatched_request_is_an_api_error_for_the_sdk(corpus_proxy: str) -> None:
    body = gemma4_request()
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(corpus_proxy).chat.completions.create(
            model=body["model"],
            messages=[{"role": "user", "content": "not recorded"}],
            stream=True,
            tools=body["tools"],
            tool_choice=body["tool_choice"],
        )
    assert caught.value.status_code == 502
    assert "body.messages[0].content" in str(caught.value)


# ── streamfix replay: changed repairs, violations, --update ──────────────────


def test_replay_check_fails_on_a_changed_repair_and_passes_after_update(tmp_path: Path) -> None:
    # Recorded when the proxy emitted calls incrementally; today's default is atomic.
    record = tmp_path / "incremental"
    with (
        running_fake_upstream() as (_, fake_url),
        running_proxy(
            f"{fake_url}/v1",
            **{"recording.record_dir": str(record), "tool_calls.emit": "incremental"},
        ) as proxy,
    ):
        raw_stream(proxy, "openai_indexed_fragmented")
        wait_for(lambda: len(list(record.glob("*.json"))) == 1)
    [path] = record.glob("*.json")
    incremental = Cassette.load(path).client_body

    result = cli("replay", str(record))
    assert result.returncode == 1, result.stdout + result.stderr
    assert statuses(result.stdout) == {path.name: "CHANGED"}
    assert "--- recorded" in result.stdout and "+++ today" in result.stdout
    assert re.search(r'^\s+-data: .*"arguments":"city"', result.stdout, re.M)
    assert re.search(
        r'^\s+\+data: .*"arguments":"\{\\"city\\":\\"Paris, France', result.stdout, re.M
    )
    assert "1 cassettes, 1 with differences or violations" in result.stdout
    assert Cassette.load(path).client_body == incremental  # nothing rewritten without --update

    updated = cli("replay", str(record), "--update")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert statuses(updated.stdout) == {path.name: "updated"}
    assert Cassette.load(path).client_body != incremental

    again = cli("replay", str(record))
    assert again.returncode == 0 and statuses(again.stdout) == {path.name: "ok"}


def test_replay_check_fails_on_an_edited_client_output(tmp_path: Path) -> None:
    name = "vllm_named_tool_choice_stop.json"
    document = json.loads((RECORDINGS / name).read_text())
    lines = document["client"]["lines"]
    [finish] = [i for i, line in enumerate(lines) if '"finish_reason":"tool_calls"' in line]
    lines[finish] = lines[finish].replace('"finish_reason":"tool_calls"', '"finish_reason":"stop"')
    (tmp_path / name).write_text(json.dumps(document, indent=2))

    result = cli("replay", str(tmp_path))
    assert result.returncode == 1
    assert statuses(result.stdout) == {name: "CHANGED"}
    assert re.search(r'^\s+-data: .*"finish_reason":"stop"', result.stdout, re.M)
    assert re.search(r'^\s+\+data: .*"finish_reason":"tool_calls"', result.stdout, re.M)
    assert cli("replay", str(tmp_path), "--update").returncode == 0
    assert (
        Cassette.load(tmp_path / name).client_body == Cassette.load(RECORDINGS / name).client_body
    )


def test_replay_check_reports_rule_violations(tmp_path: Path) -> None:
    # With every repair off, today's output is Gemini's raw stream, which breaks the rules.
    shutil.copy(RECORDINGS / "gemini_parallel_one_per_chunk.json", tmp_path)
    config = tmp_path / "plain.toml"
    config.write_text("[repairs]\nenabled = false\n")
    cassettes = tmp_path / "cassettes"
    cassettes.mkdir()
    shutil.move(tmp_path / "gemini_parallel_one_per_chunk.json", cassettes)
    result = cli("replay", str(cassettes), "--config", str(config))
    assert result.returncode == 1
    violations_found = [line for line in result.stdout.splitlines() if "VIOLATION" in line]
    assert any("without an integer index" in line for line in violations_found), result.stdout
