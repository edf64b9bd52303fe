"""The session upstream refuses what real upstreams refuse, with their bodies, and answers by
what a request holds: the real Claude Code run leans on both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support.claude_code_upstream import (
    FORCED_TOOL_MESSAGE,
    NO_PDF_ANSWER,
    PDF_ANSWER,
    Playbook,
    SessionUpstream,
    running_session_upstream,
)

PDF = b"%PDF-1.4 not much of one"
BOOK = Playbook("main", "side", "/work/a.pdf", PDF, "A title", prompt_tokens=150_000)
READ = {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}
TITLE_TOOL = {"type": "function", "function": {"name": "record", "parameters": {"type": "object"}}}


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[SessionUpstream, str]]:
    with running_session_upstream(BOOK) as pair:
        yield pair


def post(root: str, path: str, body: Any) -> httpx.Response:
    return httpx.post(f"{root}{path}", json=body, timeout=5)


def chat(root: str, **body: Any) -> httpx.Response:
    return post(root, "/v1/chat/completions", body)


def after_read(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
    return [
        {"role": "user", "content": "Read it."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "PDF file read"},
        *([{"role": "user", "content": list(parts)}] if parts else []),
    ]


def text_of(response: httpx.Response) -> str:
    return str(response.json()["choices"][0]["message"]["content"])


def test_a_query_string_gets_googles_400_and_another_path_openais_404(
    upstream: tuple[SessionUpstream, str],
) -> None:
    fake, root = upstream
    body = {"model": "main", "messages": [{"role": "user", "content": "hi"}]}
    refused = post(root, "/v1/chat/completions?beta=true", body)
    assert refused.status_code == 400
    error = refused.json()[0]["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"] == (
        'Invalid JSON payload received. Unknown name "beta": Cannot bind query parameter. '
        "Field 'beta' could not be found in request message."
    )
    assert error["details"][0]["fieldViolations"] == [{"description": error["message"]}]
    elsewhere = post(root, "/v1/messages", body)
    assert elsewhere.status_code == 404
    assert elsewhere.json()["error"]["message"] == "Invalid URL (POST /v1/messages)"
    assert [s.status for s in fake.seen[-2:]] == [400, 404]


def test_a_forced_tool_choice_is_refused_while_thinking_is_on(
    upstream: tuple[SessionUpstream, str],
) -> None:
    _, root = upstream
    messages = [{"role": "user", "content": "Name it."}]
    forced = {"type": "function", "function": {"name": "record"}}
    for choice in (forced, "required"):
        refused = chat(
            root, model="side", messages=messages, tools=[TITLE_TOOL], tool_choice=choice
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == FORCED_TOOL_MESSAGE
    off = chat(
        root,
        model="side",
        messages=messages,
        tools=[TITLE_TOOL],
        tool_choice=forced,
        thinking={"type": "disabled"},
    )
    assert off.status_code == 200
    call = off.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "record" and orjson.loads(call["arguments"]) == {"title": "A title"}
    auto = chat(root, model="side", messages=messages, tools=[TITLE_TOOL], tool_choice="auto")
    assert auto.status_code == 200


def test_the_main_model_reads_the_pdf_then_says_whether_it_arrived(
    upstream: tuple[SessionUpstream, str],
) -> None:
    _, root = upstream
    first = chat(root, model="main", messages=after_read()[:1], tools=[READ])
    call = first.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "Read" and orjson.loads(call["arguments"]) == {
        "file_path": BOOK.pdf_path
    }
    assert text_of(chat(root, model="main", messages=after_read(), tools=[READ])) == NO_PDF_ANSWER
    wrong = {
        "type": "file",
        "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,AA=="},
    }
    assert text_of(chat(root, model="main", messages=after_read(wrong))) == NO_PDF_ANSWER
    part = {"type": "file", "file": {"filename": "a.pdf", "file_data": BOOK.pdf_data_url}}
    assert text_of(chat(root, model="main", messages=after_read(part))) == PDF_ANSWER


def test_structured_output_gets_json_and_every_chunk_carries_the_usage(
    upstream: tuple[SessionUpstream, str],
) -> None:
    _, root = upstream
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    response_format = {"type": "json_schema", "json_schema": {"name": "o", "schema": schema}}
    messages = [{"role": "user", "content": "<session>…</session>"}]
    streamed = chat(
        root, model="side", messages=messages, response_format=response_format, stream=True
    )
    events = [
        orjson.loads(line[len("data: ") :])
        for line in streamed.text.split("\n\n")
        if line.startswith("data: {")
    ]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
    assert orjson.loads(text) == {"title": "A title"}
    assert events and all(e["usage"]["prompt_tokens"] == 150_000 for e in events)
    assert streamed.text.endswith("data: [DONE]\n\n")
    unknown = chat(root, model="other", messages=messages)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
