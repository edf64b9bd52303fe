"""Recording and replaying proxies served from the command line, and requests matched to
cassettes: `--replay-timing` keeps the recorded pacing, `serve --record` writes a cassette per
exchange, volatile fields do not matter, and an unmatched request gets a 404 naming the nearest
cassette and the differing field (an API error for the SDK).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.upstream.cassettes import Cassette
from tests.support.fake_upstream import (
    load_transcript,
    running_fake_upstream,
)
from tests.support.proxies import running_proxy
from tests.support.proxy_process import serving
from tests.support.recording_clients import (
    RECORDINGS,
    raw_stream,
    sdk,
    upstream_bytes,
)
from tests.support.waiting import wait_until

# ── --replay-timing, serve --record, through the command line ────────────────


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
    with serving("--replay", str(tmp_path), "--replay-timing") as proxy:
        paced, body = timed_request(proxy.url, cassette)
    with serving("--replay", str(tmp_path)) as proxy:
        fast, same = timed_request(proxy.url, cassette)
    assert paced >= 0.25
    assert fast < 0.25
    assert body == same == cassette.client_body


def test_serve_record_writes_a_cassette_per_exchange(tmp_path: Path) -> None:
    with running_fake_upstream() as (_, fake_url):
        upstream = f"{fake_url}/v1"
        with serving("--upstream", upstream, "--record", str(tmp_path)) as proxy:
            status, _, body = raw_stream(proxy.url, "vertex_jumping_index")
            assert status == 200
            wait_until(lambda: len(list(tmp_path.glob("*.json"))) == 1, "1 cassette", timeout=10.0)
    [path] = tmp_path.glob("*.json")
    assert path.name == "0001-vertex_jumping_index-stream-200.json"
    cassette = Cassette.load(path)
    assert cassette.client_body == body
    assert upstream_bytes(cassette) == load_transcript("vertex_jumping_index").sse


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
def test_unmatched_request_gets_a_404_naming_the_nearest_cassette_and_field(
    corpus_proxy: str, change: Any, field: str
) -> None:
    body = gemma4_request()
    change(body)
    response = httpx.post(f"{corpus_proxy}/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 404
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
    assert caught.value.status_code == 404
    assert "body.messages[0].content" in str(caught.value)


def test_a_miss_is_not_retried_by_the_sdk(corpus_proxy: str) -> None:
    """With the SDK's default retries (2), a miss is asked once: 404 is not among the statuses
    OpenAI's SDKs retry (408, 409, 429, >= 500), and the error names the differing field."""
    sent: list[httpx.Request] = []
    client = openai.OpenAI(
        base_url=f"{corpus_proxy}/v1",
        api_key="sk-replay",
        timeout=30,
        http_client=httpx.Client(event_hooks={"request": [sent.append]}),
    )
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(
            model="gemma", messages=[{"role": "user", "content": "never recorded"}]
        )
    assert len(sent) == 1
    assert caught.value.code == "no_matching_cassette"
    assert "differs at body.messages[0].content" in str(caught.value)
