"""A 429 whose `Retry-After` is within `upstream.retry_after_max_seconds` is waited out and the
request sent once more, on every door (server/retry_after.py): the client gets the second
answer and the upstream saw exactly two requests. A longer `Retry-After`, none, or one the
client's declared read timeout would not outlast is relayed at once after one request; a
client that leaves during the wait ends it with nothing sent again; and an exchange is sent
once more at most, whether for a 429 or for a learned refusal, never for both."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.door_clients import DOORS, Stage, serving_proxy, whole
from tests.support.scripted_chat_upstream import (
    Script,
    ScriptedChatUpstream,
    json_answer,
    openai_error_body,
    running_scripted_upstream,
)
from tests.support.waiting import wait_until

COMPLETION = {
    "id": "chatcmpl-r",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "sunny"}, "finish_reason": "stop"}
    ],
}
ANSWER = json_answer(200, COMPLETION)
SLOW_DOWN = openai_error_body("Rate limit reached for requests", "rate_limit_exceeded")
REFUSED_PARAMETER = openai_error_body(
    "Unsupported parameter: 'parallel_tool_calls' is not supported with this model."
)
KIND = "rate_limit_resent"


def limited(*headers: tuple[str, str]) -> Script:
    return json_answer(429, SLOW_DOWN, *headers)


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedChatUpstream]:
    with running_scripted_upstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def proxy(upstream: ScriptedChatUpstream) -> Iterator[str]:
    with serving_proxy(upstream.url) as url:
        yield url


def asked(upstream: ScriptedChatUpstream, model: str) -> int:
    return len(upstream.requests_for(model))


@pytest.mark.parametrize("door", DOORS)
def test_a_short_retry_after_is_waited_out_and_sent_once_more(
    upstream: ScriptedChatUpstream, proxy: str, door: str
) -> None:
    model = upstream.play_in_turn(limited(("retry-after", "1")), ANSWER)
    started = time.monotonic()
    result = whole(door, proxy, model)
    assert result.error is None and result.status == 200, result.raw
    assert "sunny" in result.raw.decode()
    assert time.monotonic() - started >= 1.0  # it waited what the upstream asked
    assert asked(upstream, model) == 2


def test_the_resend_is_counted_on_the_answer(upstream: ScriptedChatUpstream, proxy: str) -> None:
    model = upstream.play_in_turn(limited(("retry-after", "1")), ANSWER)
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{proxy}/v1/chat/completions", json=chat, timeout=10)
    assert answer.status_code == 200
    assert f"{KIND}:1" in answer.headers["x-streamfix-repairs"]


@pytest.mark.parametrize(
    "headers",
    [(("retry-after", "120"),), (), (("retry-after", "soon"),)],
    ids=["past-the-bound", "without-retry-after", "unreadable"],
)
@pytest.mark.parametrize("door", DOORS)
def test_any_other_429_is_relayed_at_once_after_one_request(
    upstream: ScriptedChatUpstream, proxy: str, door: str, headers: tuple[tuple[str, str], ...]
) -> None:
    model = upstream.play_in_turn(limited(*headers), ANSWER)
    started = time.monotonic()
    result = whole(door, proxy, model)
    assert result.status == 429, result.raw
    assert time.monotonic() - started < 1.0
    assert asked(upstream, model) == 1


@pytest.mark.parametrize("door", ["responses", "messages"])
def test_a_fronts_429_says_when_to_come_back(
    upstream: ScriptedChatUpstream, proxy: str, door: str
) -> None:
    # Rendered in the door's own error shape, it keeps the upstream's Retry-After, which the
    # client's own retry then waits for.
    model = upstream.play_in_turn(limited(("retry-after", "120")), ANSWER)
    path, body, headers = _raw_request(door, model)
    answer = httpx.post(f"{proxy}{path}", json=body, headers=headers, timeout=10)
    assert (answer.status_code, answer.headers.get("retry-after")) == (429, "120")
    assert asked(upstream, model) == 1


def test_a_wait_the_clients_read_timeout_would_not_outlast_is_not_begun(
    upstream: ScriptedChatUpstream, proxy: str
) -> None:
    # openai-python and anthropic-python say their read timeout in `x-stainless-read-timeout`.
    model = upstream.play_in_turn(limited(("retry-after", "2")), ANSWER)
    chat = openai.OpenAI(base_url=f"{proxy}/v1", api_key="k", max_retries=0, timeout=1.5)
    with pytest.raises(openai.RateLimitError):
        chat.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    assert asked(upstream, model) == 1


def test_an_http_date_within_the_bound_is_waited_out(
    upstream: ScriptedChatUpstream, proxy: str
) -> None:
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 2))
    model = upstream.play_in_turn(limited(("retry-after", when)), ANSWER)
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{proxy}/v1/chat/completions", json=chat, timeout=10)
    assert answer.status_code == 200
    assert asked(upstream, model) == 2


@pytest.mark.parametrize("door", DOORS)
def test_a_client_that_leaves_during_the_wait_ends_it(
    upstream: ScriptedChatUpstream, proxy: str, door: str
) -> None:
    model = upstream.play_in_turn(limited(("retry-after", "2")), ANSWER)
    path, body, headers = _raw_request(door, model)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{proxy}{path}", json=body, headers=headers, timeout=0.5)
    time.sleep(2.5)  # past the wait the upstream asked for
    assert asked(upstream, model) == 1


def test_no_wait_after_a_learned_resend_and_no_learned_resend_after_a_wait(
    upstream: ScriptedChatUpstream, proxy: str
) -> None:
    refused = json_answer(400, REFUSED_PARAMETER)

    def ask(*scripts: Script) -> tuple[int, str]:
        model = upstream.play_in_turn(*scripts)
        chat = {
            "model": model,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            "parallel_tool_calls": False,
        }
        answer = httpx.post(f"{proxy}/v1/chat/completions", json=chat, timeout=10)
        return answer.status_code, model

    # The learned refusal alone is sent once more without what was refused.
    status, model = ask(refused, ANSWER)
    assert (status, asked(upstream, model)) == (200, 2)
    # A 429 waited out, then a refusal that would be learned: that refusal reaches the client.
    status, model = ask(limited(("retry-after", "1")), refused, ANSWER)
    assert (status, asked(upstream, model)) == (400, 2)
    # A learned resend answered 429: relayed, however short its Retry-After.
    status, model = ask(refused, limited(("retry-after", "1")), ANSWER)
    assert (status, asked(upstream, model)) == (429, 2)


def test_zero_turns_the_wait_off(upstream: ScriptedChatUpstream) -> None:
    with serving_proxy(upstream.url, **{"upstream.retry_after_max_seconds": 0}) as proxy:
        stage = Stage(upstream, proxy)
        result = stage.whole("chat", limited(("retry-after", "1")))
    assert result.status == 429


def _raw_request(door: str, model: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    prompt = [{"role": "user", "content": "hi"}]
    if door == "chat":
        return "/v1/chat/completions", {"model": model, "messages": prompt}, {}
    if door == "responses":
        return "/v1/responses", {"model": model, "input": "hi"}, {}
    body = {"model": model, "max_tokens": 16, "messages": prompt}
    return "/v1/messages", body, {"anthropic-version": "2023-06-01"}


def test_the_departed_clients_exchange_is_booked(upstream: ScriptedChatUpstream) -> None:
    # The exchange a client left during the wait still ends, booked under the 429 it had.
    with serving_proxy(upstream.url) as proxy:
        model = upstream.play_in_turn(limited(("retry-after", "1")), ANSWER)
        path, body, headers = _raw_request("chat", model)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{proxy}{path}", json=body, headers=headers, timeout=0.3)

        def booked() -> bool:
            metrics = httpx.get(f"{proxy}/metrics", timeout=5).text
            return 'status="429"' in metrics

        wait_until(booked, "the exchange booked under its 429")
    assert asked(upstream, model) == 1
