"""The fake upstream and its transcript corpus, checked over a real uvicorn with httpx."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import httpx
import orjson
import pytest

from tests.support.fake_upstream import (
    ERROR_MODELS,
    FakeUpstream,
    Transcript,
    load_transcript,
    random_chunks,
    running_fake_upstream,
    split_events,
    transcript_names,
)
from tests.support.waiting import wait_until

NAMES = transcript_names()
REQUIRED_CASES = {
    "gemini_indexless_call_stop",
    "openai_indexed_fragmented",
    "gemini_indexless_fragmented_single",
    "openai_indexed_parallel",
    "gemini_indexless_fragmented_parallel",
    "gemini_signature_only_delta",
    "gemini_parallel_one_per_chunk",
    "vertex_jumping_index",
    "vllm_gemma4_missing_id_name",
    "openai_text_usage_only_last_chunk",
    "openai_n2_choices",
    "gemini_text_thought_signature",
    "vllm_named_tool_choice_stop",
    "openai_no_done",
}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeUpstream, str]]:
    with running_fake_upstream() as (fake, base_url):
        yield fake, base_url


@pytest.fixture
def fake(served: tuple[FakeUpstream, str]) -> FakeUpstream:
    fake = served[0]
    fake.requests.clear()
    fake.chunking, fake.delay, fake.stall_after = "event", 0.0, None
    return fake


@pytest.fixture
def client(served: tuple[FakeUpstream, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[1], timeout=10) as client:
        yield client


def chat(name: str, *, stream: bool) -> dict[str, Any]:
    return {"model": name, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}


def streamed_bytes(client: httpx.Client, name: str, prefix: str = "/v1") -> bytes:
    with client.stream("POST", f"{prefix}/chat/completions", json=chat(name, stream=True)) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        return b"".join(resp.iter_raw())


# ── the corpus ───────────────────────────────────────────────────────────────


def test_corpus_has_every_required_case() -> None:
    assert set(NAMES) >= REQUIRED_CASES


@pytest.mark.parametrize("name", NAMES)
def test_sse_is_well_formed(name: str) -> None:
    sse = load_transcript(name).sse
    events = split_events(sse)
    assert b"".join(events) == sse
    payloads = []
    for event in events:
        assert event.startswith(b"data: ") and event.endswith(b"\n\n"), event
        payload = event[len(b"data: ") : -2]
        assert b"\n" not in payload and b"\r" not in payload
        payloads.append(payload)
    done = [i for i, p in enumerate(payloads) if p == b"[DONE]"]
    assert done == ([] if name == "openai_no_done" else [len(payloads) - 1])
    for payload in payloads[: len(payloads) - len(done)]:
        chunk = orjson.loads(payload)
        assert isinstance(chunk["choices"], list)
        assert chunk.get("object", "chat.completion.chunk") == "chat.completion.chunk"


@pytest.mark.parametrize("name", NAMES)
def test_json_has_the_required_keys(name: str) -> None:
    meta = load_transcript(name).meta
    assert isinstance(meta["description"], str) and meta["description"]
    assert isinstance(meta["request"]["tools"], list)
    for tool in meta["request"]["tools"]:
        assert tool["type"] == "function" and tool["function"]["name"]
    choices = meta["expect"]["choices"]
    assert [c["index"] for c in choices] == list(range(len(choices)))
    for choice in choices:
        assert choice["finish_reason"] in ("tool_calls", "stop", "length")
        assert isinstance(choice["content"], str)
        assert (choice["finish_reason"] == "tool_calls") == bool(choice["tool_calls"])
        for call in choice["tool_calls"]:
            assert call["id"] is None or (isinstance(call["id"], str) and call["id"])
            assert isinstance(call["name"], str) and isinstance(call["arguments"], dict)
            assert isinstance(call.get("thought_signature", ""), str)
    if "response" in meta:
        assert meta["response"]["object"] == "chat.completion"


@pytest.mark.parametrize("name", NAMES)
def test_expectation_follows_from_the_stream(name: str) -> None:
    transcript = load_transcript(name)
    assert assemble(transcript) == transcript.meta["expect"]


@pytest.mark.parametrize("name", [n for n in NAMES if "response" in load_transcript(n).meta])
def test_expectation_matches_the_non_streamed_response(name: str) -> None:
    meta = load_transcript(name).meta
    for want, got in zip(meta["expect"]["choices"], meta["response"]["choices"], strict=True):
        message = got["message"]
        assert got["finish_reason"] == want["finish_reason"]
        assert (message.get("content") or "") == want["content"]
        calls = message.get("tool_calls") or []
        assert len(calls) == len(want["tool_calls"])
        for want_call, call in zip(want["tool_calls"], calls, strict=True):
            assert want_call["id"] in (None, call.get("id"))
            assert call["function"]["name"] == want_call["name"]
            assert orjson.loads(call["function"]["arguments"]) == want_call["arguments"]
            assert signature_of(call) == want_call.get("thought_signature")


# A reference reading of each stream, so the corpus checks its own "expect". It is a test
# oracle, not the proxy's algorithm: it knows just enough to read the shapes in PROTOCOL.md.


def signature_of(part: dict[str, Any]) -> str | None:
    return ((part.get("extra_content") or {}).get("google") or {}).get("thought_signature")


def text_of(content: Any) -> str:
    """A delta's text: a string, or the text blocks of an array of blocks (Magistral)."""
    if isinstance(content, list):
        return "".join(
            part.get("text") or ""
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return content or ""


def parses(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


# A `<think>` block opening the content, then the answer (whitespace around the tags apart).
THINK_BLOCK = re.compile(r"\s*<think>(?P<reasoning>.*?)</think>\s*(?P<answer>.*)", re.S)


@dataclass
class ChoiceReading:
    content: str = ""
    finish: str | None = None
    signature: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_index: dict[int, dict[str, Any]] = field(default_factory=dict)
    batch: list[dict[str, Any]] = field(default_factory=list)  # calls opened by the last chunk

    def feed(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        self.content += text_of(delta.get("content"))
        self.signature = signature_of(delta) or self.signature
        self.finish = choice.get("finish_reason") or self.finish
        opened = []
        for position, entry in enumerate(delta.get("tool_calls") or []):
            call = self.target(entry, position)
            if call is None:
                call = {"id": entry.get("id") or None, "name": None, "args": "", "sig": None}
                self.calls.append(call)
                opened.append(call)
                self.by_id.update({call["id"]: call} if call["id"] else {})
            if "index" in entry:
                self.by_index[entry["index"]] = call
            function = entry.get("function") or {}
            call["name"] = call["name"] or function.get("name")
            call["args"] += function.get("arguments") or ""
            call["sig"] = signature_of(entry) or call["sig"]
        self.batch = opened or self.batch

    def target(self, entry: dict[str, Any], position: int) -> dict[str, Any] | None:
        if entry.get("id"):
            return self.by_id.get(entry["id"])  # Vertex repeats the id under a new index
        if "index" in entry:
            return self.by_index.get(entry["index"])
        if (entry.get("function") or {}).get("name"):
            return None  # indexless, named, id empty: a new call
        return self.batch[position]  # indexless continuation: positional within the batch

    def result(self, index: int, tool_names: list[str]) -> dict[str, Any]:
        for call, following in pairwise(self.calls):  # vLLM: call N's tail under index N+1
            for cut in range(1, len(following["args"]) if not parses(call["args"]) else 0):
                head, rest = following["args"][:cut], following["args"][cut:]
                if parses(call["args"] + head) and parses(rest):
                    call["args"], following["args"] = call["args"] + head, rest
                    break
        calls = []
        for call in self.calls:
            only_tool = tool_names[0] if len(tool_names) == 1 else None
            out = {"id": call["id"], "name": call["name"] or only_tool}
            out["arguments"] = orjson.loads(call["args"])
            calls.append(out | ({"thought_signature": call["sig"]} if call["sig"] else {}))
        # An upstream that ends cleanly without any finish (Snowflake) meant "stop".
        finish = "tool_calls" if calls else self.finish or "stop"
        thought = THINK_BLOCK.fullmatch(self.content)
        out = {
            "index": index,
            "finish_reason": finish,
            "content": thought["answer"] if thought else self.content,
            "tool_calls": calls,
        }
        if thought:  # reasoning written as text, which the proxy moves to its own field
            out["reasoning_content"] = thought["reasoning"]
        return out | ({"thought_signature": self.signature} if self.signature else {})


def assemble(transcript: Transcript) -> dict[str, Any]:
    readings: dict[int, ChoiceReading] = {}
    for event in transcript.events:
        payload = event.removeprefix(b"data: ").strip()
        if payload != b"[DONE]":
            for choice in orjson.loads(payload)["choices"]:
                readings.setdefault(choice.get("index", 0), ChoiceReading()).feed(choice)
    tool_names = [t["function"]["name"] for t in transcript.meta["request"]["tools"]]
    return {"choices": [readings[i].result(i, tool_names) for i in sorted(readings)]}


# ── the fake over a real socket ──────────────────────────────────────────────


@pytest.mark.parametrize("name", NAMES)
def test_streaming_returns_the_exact_transcript_bytes(
    fake: FakeUpstream, client: httpx.Client, name: str
) -> None:
    assert streamed_bytes(client, name) == load_transcript(name).sse


def test_gemini_style_base_url_streams_too(fake: FakeUpstream, client: httpx.Client) -> None:
    name = "gemini_indexless_call_stop"
    assert streamed_bytes(client, name, "/v1beta/openai") == load_transcript(name).sse
    assert fake.requests[-1].path == "/v1beta/openai/chat/completions"


@pytest.mark.parametrize("chunking", ["bytes", random_chunks(seed=7)], ids=["bytes", "random"])
def test_finer_chunking_sends_the_same_bytes(
    fake: FakeUpstream, client: httpx.Client, chunking: Any
) -> None:
    fake.chunking = chunking
    for name in ("gemini_indexless_fragmented_parallel", "openai_n2_choices", "openai_no_done"):
        assert streamed_bytes(client, name) == load_transcript(name).sse


def test_chunking_bytes_writes_one_byte_at_a_time(fake: FakeUpstream) -> None:
    fake.chunking = "bytes"
    transcript = load_transcript("vllm_gemma4_missing_id_name")
    pieces = fake._pieces(transcript)
    assert len(pieces) == len(transcript.sse) and b"".join(pieces) == transcript.sse


def test_non_streamed_request_gets_the_response_body(
    fake: FakeUpstream, client: httpx.Client
) -> None:
    name = "gemini_indexless_call_stop"
    resp = client.post("/v1/chat/completions", json=chat(name, stream=False))
    assert resp.status_code == 200
    assert resp.json() == load_transcript(name).meta["response"]


def test_non_streamed_request_without_a_response_is_404(client: httpx.Client) -> None:
    resp = client.post("/v1/chat/completions", json=chat("openai_no_done", stream=False))
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "model_not_found"


def test_unknown_model_is_404(client: httpx.Client) -> None:
    resp = client.post("/v1/chat/completions", json=chat("../servers", stream=True))
    assert resp.status_code == 404
    assert "does not exist" in resp.json()["error"]["message"]


@pytest.mark.parametrize("stream", [True, False])
def test_gemini_error_is_a_json_array(client: httpx.Client, stream: bool) -> None:
    resp = client.post(
        "/v1beta/openai/chat/completions", json=chat("error_gemini_array", stream=stream)
    )
    assert resp.status_code == 400
    assert resp.headers["content-type"] == "application/json"
    [entry] = resp.json()
    assert entry["error"]["code"] == 400 and entry["error"]["status"] == "INVALID_ARGUMENT"
    assert "thought_signature" in entry["error"]["message"]


@pytest.mark.parametrize("stream", [True, False])
def test_openai_401_is_an_error_object(client: httpx.Client, stream: bool) -> None:
    resp = client.post("/v1/chat/completions", json=chat("error_openai_401", stream=stream))
    assert resp.status_code == 401
    assert resp.json() == ERROR_MODELS["error_openai_401"][1]
    assert resp.json()["error"]["code"] == "invalid_api_key"


def test_models_lists_every_transcript(fake: FakeUpstream, client: httpx.Client) -> None:
    resp = client.get("/v1/models")
    assert resp.status_code == 200
    assert {m["id"] for m in resp.json()["data"]} >= set(NAMES) | set(ERROR_MODELS)
    assert fake.requests[-1].method == "GET" and fake.requests[-1].path == "/v1/models"


def test_other_paths_echo_what_arrived(fake: FakeUpstream, client: httpx.Client) -> None:
    resp = client.post(
        "/v1/embeddings?dims=8&x=%2F",
        json={"input": "hello"},
        headers={"Authorization": "Bearer sk-test", "X-Custom": "1"},
    )
    assert resp.status_code == 200
    echo = resp.json()
    assert (echo["method"], echo["path"], echo["query"]) == (
        "POST",
        "/v1/embeddings",
        "dims=8&x=%2F",
    )
    assert echo["json"] == {"input": "hello"} and orjson.loads(echo["body"]) == {"input": "hello"}
    assert echo["headers"]["authorization"] == "Bearer sk-test"

    resp = client.request("DELETE", "/v1/files/file-abc", content=b"\xff not json")
    assert resp.json()["method"] == "DELETE" and resp.json()["json"] is None


def test_requests_are_recorded(fake: FakeUpstream, client: httpx.Client) -> None:
    body = chat("openai_indexed_fragmented", stream=True)
    client.post("/v1/chat/completions?trace=1", json=body, headers={"X-Tenant": "acme"})
    client.put("/v1/things/1", content=b"\x00raw")
    first, second = fake.requests
    assert (first.method, first.path, first.query) == ("POST", "/v1/chat/completions", "trace=1")
    assert first.body == body and first.json == body
    assert first.headers["x-tenant"] == "acme"
    assert all(name == name.lower() for name in first.headers)
    assert (second.method, second.path, second.body, second.json) == (
        "PUT",
        "/v1/things/1",
        b"\x00raw",
        None,
    )


def test_open_streams_counts_down_when_the_stream_ends(
    fake: FakeUpstream, client: httpx.Client
) -> None:
    streamed_bytes(client, "openai_indexed_parallel")
    wait_until(lambda: fake.open_streams == 0, "no open streams")


def test_open_streams_counts_down_when_the_client_goes_away(
    fake: FakeUpstream, client: httpx.Client
) -> None:
    fake.stall_after = 1
    body = chat("gemini_indexless_fragmented_single", stream=True)
    with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        chunks = resp.iter_raw()  # keep a reference: a dropped generator closes the response
        first = next(chunks)
        assert first == load_transcript("gemini_indexless_fragmented_single").events[0]
        assert fake.open_streams == 1
    wait_until(lambda: fake.open_streams == 0, "no open streams")
