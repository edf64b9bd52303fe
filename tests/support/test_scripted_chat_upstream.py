"""The scripted chat upstream plays its scripts byte for byte and refuses, with the real
upstreams' bodies, what they refuse: the doors' tests lean on both."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.scripted_chat_upstream import (
    CUT,
    Script,
    ScriptedChatUpstream,
    json_answer,
    running_scripted_upstream,
)

EVENT = b'data: {"choices":[]}\n\n'


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedChatUpstream]:
    with running_scripted_upstream() as scripted:
        yield scripted


def post(upstream: ScriptedChatUpstream, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{upstream.url}{path}", timeout=5, **kwargs)


def test_a_script_is_played_as_written(upstream: ScriptedChatUpstream) -> None:
    model = upstream.play(Script([EVENT, 0.3, EVENT]))
    started = time.monotonic()
    response = post(upstream, "/v1/chat/completions", json={"model": model, "stream": True})
    assert time.monotonic() - started >= 0.3
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.content == EVENT + EVENT
    (received,) = upstream.requests_for(model)
    assert (received.method, received.path, received.refused) == (
        "POST",
        "/v1/chat/completions",
        None,
    )


def test_a_cut_leaves_the_body_unfinished(upstream: ScriptedChatUpstream) -> None:
    model = upstream.play(Script([EVENT[:10], CUT]))
    with pytest.raises(httpx.RemoteProtocolError):
        post(upstream, "/v1/chat/completions", json={"model": model})


def test_an_error_answer_has_its_status_headers_and_body(upstream: ScriptedChatUpstream) -> None:
    model = upstream.play(
        json_answer(429, {"error": {"message": "slow down"}}, ("retry-after", "3"))
    )
    response = post(upstream, "/v1/chat/completions", json={"model": model})
    assert response.status_code == 429
    assert response.reason_phrase == "Too Many Requests"
    assert response.headers["retry-after"] == "3"
    assert response.json() == {"error": {"message": "slow down"}}


def test_another_path_gets_openais_404(upstream: ScriptedChatUpstream) -> None:
    model = upstream.play(Script([EVENT]))
    response = post(upstream, "/v1/chat/completion", json={"model": model})
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": "Invalid URL (POST /v1/chat/completion)",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert upstream.refusals[-1] == "Invalid URL (POST /v1/chat/completion)"


def test_a_query_string_gets_googles_400(upstream: ScriptedChatUpstream) -> None:
    model = upstream.play(Script([EVENT]))
    response = post(upstream, "/v1/chat/completions?alt=sse", json={"model": model})
    assert response.status_code == 400
    (error,) = response.json()
    assert error["error"]["status"] == "INVALID_ARGUMENT"
    assert 'Unknown name "alt": Cannot bind query parameter.' in error["error"]["message"]


def test_a_body_that_is_not_json_and_an_unknown_model_are_refused(
    upstream: ScriptedChatUpstream,
) -> None:
    assert post(upstream, "/v1/chat/completions", content=b"{no").status_code == 400
    response = post(upstream, "/v1/chat/completions", json={"model": "gpt-nothing"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
