"""What the hostile passes (test_hostile_requests.py, test_hostile_upstream.py) found at the
fronts' doors, each written out as one example: the app in process, strict repairs, app
exceptions raised, a fake chat upstream."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.fronts.hostile import (
    MESSAGES_HEADERS,
    RESPONSES_HEADERS,
    Session,
    anthropic_error_problem,
    check_messages_answer,
    check_responses_answer,
    exchange,
    openai_error_problem,
    responses_events,
)
from tests.fronts.messages_checks import parse as parse_messages
from tests.fronts.test_hostile_requests import ValidUpstream
from tests.fronts.test_hostile_upstream import CHUNKS, SSE, answering, message_blocks, sse

HUGE = 2**70
RESPONSES = {"model": "m", "input": "hi"}
MESSAGES = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def nested(levels: int, inner: str = "1") -> str:
    return "[" * levels + inner + "]" * levels


@pytest.mark.parametrize("stream", [True, False])
def test_an_echoed_request_field_with_an_integer_past_64_bits(stream: bool) -> None:
    """The response object echoes `metadata` and `temperature`: orjson could not write them,
    so `response.created` (or the whole body) raised TypeError, a 500."""
    body = {**RESPONSES, "stream": stream, "metadata": {"n": HUGE}, "temperature": HUGE}
    answer = exchange(
        "/v1/responses", json.dumps(body).encode(), ValidUpstream(), RESPONSES_HEADERS
    )
    check_responses_answer(answer)
    response = responses_events(answer)[0]["response"] if stream else answer.json()
    assert response["metadata"] == {"n": HUGE} and response["temperature"] == HUGE


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/v1/responses", RESPONSES, RESPONSES_HEADERS),
        ("/v1/messages", MESSAGES, MESSAGES_HEADERS),
        ("/v1/messages/count_tokens", {**MESSAGES, "max_tokens": None}, MESSAGES_HEADERS),
        ("/v1/chat/completions", {"model": "m", "messages": []}, RESPONSES_HEADERS),
    ],
)
def test_a_body_nested_past_what_can_be_written_back_is_a_400(
    path: str, body: dict[str, Any], headers: dict[str, str]
) -> None:
    """orjson reads 1024 levels; written again (a front's echo, the chat request sent on) one
    nested 1010 deep raised RecursionError on every door (the chat door answered a 500)."""
    text = json.dumps({**body, "temperature": "DEEP"}).replace('"DEEP"', nested(1010))
    answer = exchange(path, text.encode(), ValidUpstream(), headers)
    assert answer.status_code == 400, answer.text
    assert "nested deeper than 254 levels" in answer.text
    problem = anthropic_error_problem if "messages" in path else openai_error_problem
    if path != "/v1/chat/completions":  # the chat door's own shape has no `param`
        assert problem(answer) is None


def test_a_field_nested_as_deep_as_allowed_is_still_echoed() -> None:
    """The body nests 254 levels (as deep as orjson writes); `response.created` one more, which
    orjson refused (a 500): the standard library writes it."""
    text = json.dumps({**RESPONSES, "stream": True, "temperature": "DEEP"})
    text = text.replace('"DEEP"', nested(253))
    answer = exchange("/v1/responses", text.encode(), ValidUpstream(), RESPONSES_HEADERS)
    check_responses_answer(answer)


def test_the_proxys_own_error_on_the_responses_door_has_openais_param() -> None:
    """An upstream that cannot be reached: the proxy's own error body lacked `param`."""

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    answer = exchange(
        "/v1/responses", json.dumps(RESPONSES).encode(), unreachable, RESPONSES_HEADERS
    )
    assert answer.status_code == 502
    assert openai_error_problem(answer) is None
    assert answer.json()["error"]["param"] is None
    assert "x-request-id" in answer.headers


@pytest.mark.parametrize(
    "body",
    [b"", b"<html><body>502 Bad Gateway</body></html>", b'{"choices": []}', b": ping\n\n"],
    ids=["empty", "html", "json", "comment only"],
)
def test_a_200_stream_without_an_event_is_a_failure_not_an_empty_answer(body: bytes) -> None:
    """It became `response.completed` with no output, or `end_turn` with no content: the
    client was told the model said nothing."""
    upstream = answering(200, body, SSE)
    request = {**RESPONSES, "stream": True}
    answer = exchange("/v1/responses", json.dumps(request).encode(), upstream, RESPONSES_HEADERS)
    check_responses_answer(answer)
    final = responses_events(answer)[-1]
    assert final["type"] == "response.failed"
    assert final["response"]["error"]["code"] == "upstream_no_events"
    request = {**MESSAGES, "stream": True}
    answer = exchange("/v1/messages", json.dumps(request).encode(), upstream, MESSAGES_HEADERS)
    check_messages_answer(answer)
    assert [e["type"] for e in parse_messages(answer.content)] == ["message_start", "error"]


@pytest.mark.parametrize("stream", [True, False])
def test_only_done_is_still_an_empty_answer(stream: bool) -> None:
    """`[DONE]` alone is the upstream saying it is done: an answer, however empty."""
    upstream = answering(200, b"data: [DONE]\n\n", SSE)
    request = {**RESPONSES, "stream": True}
    answer = exchange("/v1/responses", json.dumps(request).encode(), upstream, RESPONSES_HEADERS)
    assert responses_events(answer)[-1]["type"] == "response.completed"


@pytest.mark.parametrize("stream", [True, False])
def test_a_whole_body_whose_choices_are_not_a_list_is_a_502(stream: bool) -> None:
    """`{"choices": 5}` raised TypeError in the Responses front (a 500); it is no answer."""
    upstream = answering(200, b'{"choices": 5}', {"content-type": "application/json"})
    for path, body, headers, problem in (
        ("/v1/responses", RESPONSES, RESPONSES_HEADERS, openai_error_problem),
        ("/v1/messages", MESSAGES, MESSAGES_HEADERS, anthropic_error_problem),
    ):
        answer = exchange(path, json.dumps({**body, "stream": stream}).encode(), upstream, headers)
        assert answer.status_code == 502 and problem(answer) is None


@pytest.mark.parametrize("front", ["responses", "messages"])
def test_a_receipt_with_an_integer_past_64_bits_is_kept_and_comes_back(front: str) -> None:
    """The turn's store write raised TypeError (orjson): the stream ended without its terminal
    event. Now the follow-up gets the receipt back exactly."""
    chunks: list[Any] = json.loads(json.dumps(CHUNKS))
    chunks[3]["choices"][0]["delta"]["tool_calls"][0]["extra_content"] = {"n": HUGE}
    session = Session(answering(200, sse(chunks), SSE))
    if front == "responses":
        first = session.post(
            "/v1/responses", json.dumps({**RESPONSES, "stream": True}).encode(), RESPONSES_HEADERS
        )
        check_responses_answer(first)
        output = responses_events(first)[-1]["response"]["output"]
        follow_up = {**RESPONSES, "input": [{"role": "user", "content": "hi"}, *output]}
        path, headers = "/v1/responses", RESPONSES_HEADERS
    else:
        first = session.post(
            "/v1/messages", json.dumps({**MESSAGES, "stream": True}).encode(), MESSAGES_HEADERS
        )
        check_messages_answer(first)
        blocks = message_blocks(first)
        follow_up = {
            **MESSAGES,
            "messages": [*MESSAGES["messages"], {"role": "assistant", "content": blocks}],
        }
        path, headers = "/v1/messages", MESSAGES_HEADERS
    sent: list[Any] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return ValidUpstream()(request)

    session.upstream = upstream
    session.post(path, json.dumps(follow_up).encode(), headers)
    assistant = next(m for m in sent[0]["messages"] if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["extra_content"] == {"n": HUGE}
