"""A Gemini call with a thought signature, and its follow-up, through a proxy whose receipt store
is a real redis-server: the requests, and what Redis and the upstream saw.

The upstream is tests/support/fake_upstream.py in Gemini's shape (`/v1beta/openai`); the model
names contain "gemini", so Google's rules apply to a 127.0.0.1 upstream.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis

from proxy.repair.conformance import violations
from tests.support.fake_upstream import FakeUpstream, load_transcript
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

CALL_TRANSCRIPT = "gemini_indexless_call_stop"
FOLLOW_UP_MODEL = "gemini_text_thought_signature"  # any transcript, so the fake answers
CALL_ID = "623rbkd0"
SIGNATURE = load_transcript(CALL_TRANSCRIPT).meta["expect"]["choices"][0]["tool_calls"][0][
    "thought_signature"
]
CLIENT_HEADERS = {"authorization": "Bearer sk-streamfix-redis-tenant"}
WRITE_WAIT = 5.0  # seconds for an exchange's receipts to land in Redis


def first_request() -> dict[str, Any]:
    return {
        "model": CALL_TRANSCRIPT,
        "stream": True,
        "messages": [{"role": "user", "content": "Read gateway.go"}],
        "tools": load_transcript(CALL_TRANSCRIPT).meta["request"]["tools"],
    }


def follow_up_request() -> dict[str, Any]:
    """PROTOCOL.md §3's correct follow-up, minus the `extra_content` clients drop."""
    return {
        "model": FOLLOW_UP_MODEL,
        "stream": True,
        "messages": [
            {"role": "user", "content": "Read gateway.go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": CALL_ID,
                        "type": "function",
                        "function": {
                            "name": "read",
                            "arguments": '{"filePath":"/src/gateway.go"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": CALL_ID, "content": "package main\n..."},
        ],
        "tools": load_transcript(CALL_TRANSCRIPT).meta["request"]["tools"],
    }


def stream_through(proxy: str, body: dict[str, Any]) -> bytes:
    """POST a streamed chat through the proxy; assert a 200 and a complete, valid stream."""
    response = httpx.post(
        f"{proxy}/v1/chat/completions", json=body, headers=CLIENT_HEADERS, timeout=15
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content.rstrip().endswith(b"data: [DONE]"), response.content[-300:]
    assert b'"error"' not in response.content, response.content
    assert violations(response.content) == []
    return response.content


def sent_call_signature(fake: FakeUpstream, model: str = FOLLOW_UP_MODEL) -> str | None:
    """The signature on the follow-up's call as the upstream received it (None: none)."""
    sent = fake.requests[-1].json
    assert sent["model"] == model
    call = sent["messages"][1]["tool_calls"][0]
    assert call["id"] == CALL_ID
    return ((call.get("extra_content") or {}).get("google") or {}).get("thought_signature")


def redis_keys(server: RedisServer) -> list[bytes]:
    with redis.Redis.from_url(server.url, socket_timeout=2) as client:
        return sorted(client.keys("*"))


def wait_for_receipts(server: RedisServer, at_least: int = 1) -> list[bytes]:
    """Poll Redis until the exchange's receipts have landed (bounded by WRITE_WAIT)."""
    keys: list[bytes] = []

    def landed() -> bool:
        keys[:] = redis_keys(server)
        return len(keys) >= at_least

    try:
        wait_until(landed, f"{at_least} receipt key(s) in Redis", WRITE_WAIT, interval=0.05)
    except AssertionError as timed_out:
        pytest.fail(f"{timed_out} (keys: {keys})")
    return keys
