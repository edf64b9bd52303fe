"""A front exchange the upstream refuses before its first byte is recorded like a chat one: the
cassette keeps the front's error body the client got, and a replaying proxy (no upstream at
all) answers the same request with the same status and body."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.upstream.cassettes import Cassette
from tests.support.proxies import running_proxy
from tests.support.refusing_upstream import RefusingUpstream, running_refusing_upstream

REFUSAL = (
    400,
    "application/json",
    orjson.dumps({"error": {"message": "model m is not served here", "type": "invalid_request"}}),
)
DOORS: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
    "responses": (
        "/v1/responses",
        {"model": "m", "input": "hi", "stream": True},
        {"authorization": "Bearer sk-test"},
    ),
    "messages": (
        "/v1/messages",
        {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
        {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"},
    ),
}


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_refused_front_exchange_is_recorded_and_replays(door: str, tmp_path: Path) -> None:
    path, body, headers = DOORS[door]
    fake = RefusingUpstream(lambda body, raw: None, fixed=REFUSAL)
    with (
        running_refusing_upstream(fake) as base_url,
        running_proxy(base_url, **{"recording.record_dir": str(tmp_path)}) as proxy,
    ):
        live = httpx.post(f"{proxy}{path}", json=body, headers=headers, timeout=10)
    assert live.status_code == 400
    assert b"model m is not served here" in live.content
    (cassette_path,) = tmp_path.glob("*.json")
    assert Cassette.load(cassette_path).client_body == live.content
    replay = {"recording.replay_dir": str(tmp_path)}
    with running_proxy("http://127.0.0.1:9/v1", **replay) as proxy:
        replayed = httpx.post(f"{proxy}{path}", json=body, headers=headers, timeout=10)
    assert (replayed.status_code, replayed.content) == (live.status_code, live.content)
