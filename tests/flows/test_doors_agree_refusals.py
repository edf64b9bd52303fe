"""An upstream that refuses before its body (a 400 with Google's array-shaped error, a 429, a
503) is answered on every door in that door's own error shape, with the upstream's status and
its words, and the upstream was asked exactly once: the proxy sends nothing again by itself
(a client retries a 429 or a 503 when it chooses; a resend of its own would double that). The
one exception, a 429 whose `Retry-After` is within `upstream.retry_after_max_seconds`, is
waited out once (tests/flows/test_rate_limit_wait.py): the 429 here asks for a minute.

Streamed or not, the client gets the HTTP error, not a stream: its SDK raises the status's own
exception (`BadRequestError`, `RateLimitError`, `InternalServerError`) at `create()`. The
status is the upstream's exactly: the SDKs pick their exception class, and their retry, by it.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.support.door_answers import whole_error_text
from tests.support.door_clients import DOORS, Stage
from tests.support.fake_upstream import ERROR_HEADERS, ERROR_MODELS
from tests.support.scripted_chat_upstream import Script, json_answer

GOOGLE_MESSAGE = "Request contains an invalid argument."
OPENAI_429_STATUS, OPENAI_429 = ERROR_MODELS["error_openai_429"]
OVERLOADED = "The engine is currently overloaded, please try again later"

REFUSALS: dict[str, tuple[Script, str]] = {
    # Google's OpenAI-compatible endpoint wraps its error in a list.
    "google-400-array": (
        json_answer(
            400,
            [{"error": {"code": 400, "message": GOOGLE_MESSAGE, "status": "INVALID_ARGUMENT"}}],
        ),
        GOOGLE_MESSAGE,
    ),
    "openai-429": (
        json_answer(
            OPENAI_429_STATUS,
            OPENAI_429,
            *{**ERROR_HEADERS["error_openai_429"], "retry-after": "60"}.items(),
        ),
        OPENAI_429["error"]["message"],
    ),
    "openai-503": (
        json_answer(
            503,
            {"error": {"message": OVERLOADED, "type": "server_error", "param": None, "code": None}},
        ),
        OVERLOADED,
    ),
}

EXCEPTIONS = {
    400: (openai.BadRequestError, anthropic.BadRequestError),
    429: (openai.RateLimitError, anthropic.RateLimitError),
    503: (openai.InternalServerError, anthropic.InternalServerError),
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("refusal", sorted(REFUSALS))
@pytest.mark.parametrize("door", DOORS)
def test_an_upstream_refusal_is_the_doors_error_with_its_status_and_words_asked_once(
    stage: Stage, door: str, refusal: str, stream: bool
) -> None:
    script, message = REFUSALS[refusal]
    result = stage.whole(door, script, stream)  # checks the upstream was asked exactly once
    assert message in whole_error_text(result, script.status)
    chat_sdk, messages_sdk = EXCEPTIONS[script.status]
    assert isinstance(result.error, messages_sdk if door == "messages" else chat_sdk)


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_chat_client_gets_the_upstreams_refusal_as_sent_but_for_googles_array(
    stage: Stage, refusal: str
) -> None:
    # The chat door relays a refusal byte for byte; Google's array around its error object is
    # the one thing OpenAI's clients cannot read, so only that goes, and it is counted.
    script, _ = REFUSALS[refusal]
    model = stage.upstream.play(script)
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(f"{stage.proxy}/v1/chat/completions", json=body, timeout=10)
    stage.reached_once(model)
    sent = b"".join(step for step in script.steps if isinstance(step, bytes))
    assert response.status_code == script.status
    repairs = response.headers["x-streamfix-repairs"]
    if refusal == "google-400-array":
        assert response.content == orjson.dumps(orjson.loads(sent)[0])
        assert "error_body_unwrapped:1" in repairs
    else:
        assert response.content == sent
        assert "error_body_unwrapped" not in repairs
