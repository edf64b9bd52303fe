"""A JSON schema response format learned from DeepSeek's refusal, through the real proxy under
uvicorn with no configuration, against the DeepSeek fake (tests/support/reasoning_upstreams.py)
on 127.0.0.1 with model "m": no vendor in the URL or the model, so only the wire can teach it.

DeepSeek refuses `response_format` `json_schema` ("This response_format type is unavailable
now", 400) and takes `json_object` only when the prompt says "json". The first structured
request is refused once and sent once more as JSON mode with the schema in the system message;
the client gets 200 and its JSON; the next request goes that way at once, streamed and not, and
through the Messages front (Claude Code's session title) alike. An upstream that takes the
schema gets the client's bytes, untouched; a resend refused again goes to the client and
nothing is sent a third time.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
import pytest

from tests.support.message_upstreams import qwen_template
from tests.support.proxies import running_proxy
from tests.support.reasoning_upstreams import TextStep, running_deepseek_upstream
from tests.support.refusing_upstream import (
    JSON,
    RefusingUpstream,
    Rejection,
    deepseek_formats,
    running_refusing_upstream,
)

TITLE = {"title": "Reading a.txt"}
SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
    "additionalProperties": False,
}
INSTRUCTION = (
    "Answer with one JSON object, and nothing else, that validates against this JSON schema: "
    + orjson.dumps(SCHEMA).decode()
)
SYSTEM = {"role": "system", "content": "You write short session titles."}
USER = {"role": "user", "content": "Read a.txt and tell me what it says."}
REFUSED = (
    b'{"error":{"message":"This response_format type is unavailable now",'
    b'"type":"invalid_request_error","param":null,"code":"invalid_request_error"}}'
)


def structured(stream: bool = False, messages: list[dict[str, Any]] | None = None) -> bytes:
    """A session-title request as the AI SDK's generateObject sends it (a named, strict JSON
    schema), written with spaces and in this key order, so that bytes show what was touched."""
    body = {
        "model": "m",
        "messages": messages or [SYSTEM, USER],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "title", "strict": True, "schema": SCHEMA},
        },
        "stream": stream,
    }
    return json.dumps(body, indent=1).encode()


def post(proxy: str, raw: bytes) -> httpx.Response:
    headers = {"content-type": JSON, "authorization": "Bearer sk-test"}
    return httpx.post(f"{proxy}/v1/chat/completions", content=raw, headers=headers, timeout=30)


def repairs(response: httpx.Response) -> dict[str, int]:
    said = response.headers.get("x-streamfix-repairs", "none")
    if said == "none":
        return {}
    return {kind: int(n) for kind, n in (item.split(":") for item in said.split(","))}


def content(response: httpx.Response, stream: bool) -> str:
    if not stream:
        return str(response.json()["choices"][0]["message"]["content"])
    assert response.text.endswith("data: [DONE]\n\n")
    pieces = []
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in orjson.loads(line[6:])["choices"]:
                pieces.append(choice["delta"].get("content") or "")
    return "".join(pieces)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_deepseek_refuses_the_schema_once_and_json_mode_goes_from_then_on(stream: bool) -> None:
    script = [[TextStep(json.dumps(TITLE))]]
    with (
        running_deepseek_upstream(script=script) as (fake, root),
        running_proxy(f"{root}/v1") as proxy,
    ):
        learned = post(proxy, structured(stream))
        remembered = post(proxy, structured(stream))
    assert learned.status_code == remembered.status_code == 200, learned.text
    # One refused send, its resend, then right the first time: never more.
    assert [status for status, _ in fake.responses] == [400, 200, 200]
    assert fake.responses[0][1] == REFUSED  # DeepSeek's own body, byte for byte
    first, resent, later = (request.raw for request in fake.requests)
    assert first == structured(stream)  # the client's bytes, as they came
    assert resent == later
    sent = orjson.loads(resent)
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["messages"] == [
        {"role": "system", "content": SYSTEM["content"] + "\n\n" + INSTRUCTION},
        USER,
    ]
    assert {k: v for k, v in sent.items() if k not in ("messages", "response_format")} == {
        "model": "m",
        "stream": stream,
    }
    assert repairs(learned) == {
        "response_format_schema_learned": 1,
        "response_format_downgraded": 1,
    }
    assert repairs(remembered) == {"response_format_downgraded": 1}
    for response in (learned, remembered):
        assert json.loads(content(response, stream)) == TITLE


def test_an_upstream_that_takes_the_schema_gets_the_clients_bytes() -> None:
    fake = RefusingUpstream(lambda body, raw: None)
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        responses = [post(proxy, structured(stream)) for stream in (False, True, False)]
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert fake.received == [structured(False), structured(True), structured(False)]
    assert all(repairs(r) == {} for r in responses)


def test_the_resend_refused_again_goes_to_the_client_and_is_never_sent_a_third_time() -> None:
    """Behind a Qwen template that wants one leading system message too: the format is learned
    on the first request, whose resend is refused for the late system message and reaches the
    client as it came; the next request, JSON mode up front, learns the messages rule in turn."""

    def refuses(body: dict[str, Any], raw: bytes) -> Rejection | None:
        return deepseek_formats(body, raw) or qwen_template(body, raw)

    late = {"role": "system", "content": "Keep it under five words."}
    raw = structured(messages=[USER, late])
    fake = RefusingUpstream(refuses)
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        first = post(proxy, raw)
        assert len(fake.received) == 2  # the refusal and its one resend: never a third
        second = post(proxy, raw)
    again = qwen_template(orjson.loads(fake.received[1]), fake.received[1])
    assert again is not None
    assert (first.status_code, first.content) == (again[0], again[2])
    assert second.status_code == 200, second.text
    assert fake.refused() == [True, True, True, False]
    assert repairs(second) == {
        "response_format_downgraded": 1,
        "system_messages_learned": 1,
        "system_messages_merged": 1,
    }
    messages = orjson.loads(fake.received[3])["messages"]
    assert messages == [
        {"role": "system", "content": INSTRUCTION + "\n\n" + late["content"]},
        USER,
    ]


def test_claude_codes_title_request_through_the_messages_front_is_learned_the_same_way() -> None:
    """Claude Code asks for its session title with `output_config.format` (a JSON schema),
    which the Messages front sends as chat's `json_schema`: one core, the same learning."""
    title = {
        "model": "m",
        "max_tokens": 100,
        "system": [{"type": "text", "text": SYSTEM["content"]}],
        "messages": [{"role": "user", "content": USER["content"]}],
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
    }
    headers = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
    with (
        running_deepseek_upstream(script=[[TextStep(json.dumps(TITLE))]]) as (fake, root),
        running_proxy(f"{root}/v1") as proxy,
    ):
        answers = [
            httpx.post(f"{proxy}/v1/messages", json=title, headers=headers, timeout=30)
            for _ in range(2)
        ]
    assert [a.status_code for a in answers] == [200, 200], answers[0].text
    assert [status for status, _ in fake.responses] == [400, 200, 200]
    for answer in answers:
        (block,) = [b for b in answer.json()["content"] if b["type"] == "text"]
        assert json.loads(block["text"]) == TITLE
    sent = fake.requests[2].json
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["messages"][0] == {
        "role": "system",
        "content": SYSTEM["content"] + "\n\n" + INSTRUCTION,
    }
