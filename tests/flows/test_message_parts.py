"""PDFs and prompt-cache marks through the Messages front, the real proxy under uvicorn and the
real Anthropic SDK (or Claude Code's request shape, tests/fronts/fixtures/), against fakes on
127.0.0.1 with model "m" that take or refuse exactly what the real upstreams do, with their
real bodies (tests/support/part_upstreams.py): no vendor in the URL or the model, so only the
wire teaches the proxy, unless a test names a profile.

A `document` block goes up as a chat `file` part. An upstream that refuses `file` parts
(DeepSeek, vLLM) is answered once, a 400 in Anthropic's shape naming the block, learned; the
next request with a PDF is answered the same at once and never sent. Marks go up where
OpenRouter reads them; an upstream that refuses them (Groq's words, DeepSeek's and Groq's for
a system prompt as parts) gets the request once more without them, byte for byte what it took
before marks were carried, and never with them again; one that refuses only the `ttl` gets the
marks without it. A request without marks goes up as it always did.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from proxy.fronts.messages.request import translate
from tests.fronts.test_messages_request import (
    CLAUDE_CODE_BETAS,
    FIXTURES,
    claude_code_request,
    without_marks,
)
from tests.support.part_upstreams import deepseek_parts, groq_parts, ttl_refused, vllm_file_parts
from tests.support.proxies import running_proxy
from tests.support.refusing_upstream import (
    ANSWER_PREFIX,
    Checker,
    RefusingUpstream,
    running_refusing_upstream,
)

PDF_DATA = "JVBERi0xLjQKJcfsj6IKMSAwIG9iago="
PDF = {
    "type": "document",
    "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_DATA},
    "title": "report.pdf",
}
FILE_PART = {
    "type": "file",
    "file": {"filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF_DATA}"},
}
HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}


def client(proxy: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy, api_key="sk-test", max_retries=0)


ESTIMATED = "messages_input_tokens_estimated"
"""Counted when an answer reports no prompt tokens (these fakes report none): not a part's."""


def repairs(headers: httpx.Headers) -> dict[str, int]:
    said = headers.get("x-streamfix-repairs", "none")
    if said == "none":
        return {}
    counts = {kind: int(n) for kind, n in (item.split(":") for item in said.split(","))}
    counts.pop(ESTIMATED, None)
    return counts


def accepting() -> RefusingUpstream:
    return RefusingUpstream(lambda body, raw: None)


# ── PDFs ─────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_pdf_goes_up_as_a_file_part_to_an_upstream_that_reads_files(stream: bool) -> None:
    """Before, the front refused it: 400 "block type 'document' is not supported"."""
    fake = accepting()
    content = [PDF, {"type": "text", "text": "Sum it up."}]
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        messages: Any = [{"role": "user", "content": content}]
        if stream:
            with client(proxy).messages.stream(model="m", max_tokens=50, messages=messages) as s:
                message = s.get_final_message()
        else:
            message = client(proxy).messages.create(model="m", max_tokens=50, messages=messages)
    assert message.content[0].type == "text"
    assert message.content[0].text.startswith(ANSWER_PREFIX)
    (sent,) = fake.bodies()
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "report.pdf"}, FILE_PART, content[1]],
        }
    ]


def test_claude_codes_read_of_a_pdf_reaches_the_upstream_after_its_tool_result() -> None:
    """Claude Code's Read tool answers a PDF as a document block inside its tool_result; a chat
    `tool` message takes text only, so the file follows in the user message."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "r.pdf"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [PDF]}
    body = {
        "model": "m",
        "max_tokens": 50,
        "messages": [
            {"role": "user", "content": "read r.pdf"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ],
        "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
    }
    fake = accepting()
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        answer = httpx.post(f"{proxy}/v1/messages", json=body, headers=HEADERS, timeout=30)
    assert answer.status_code == 200, answer.text
    sent = fake.bodies()[0]["messages"]
    assert sent[2:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "report.pdf"}, FILE_PART]},
    ]


@pytest.mark.parametrize("refuses", [deepseek_parts, vllm_file_parts], ids=["deepseek", "vllm"])
def test_an_upstream_that_refuses_file_parts_is_answered_clearly_and_then_at_once(
    refuses: Checker,
) -> None:
    fake = RefusingUpstream(refuses)
    messages: Any = [{"role": "user", "content": [PDF, {"type": "text", "text": "Sum it up."}]}]
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        sdk = client(proxy)
        with pytest.raises(anthropic.BadRequestError) as first:
            sdk.messages.create(model="m", max_tokens=50, messages=messages)
        with pytest.raises(anthropic.BadRequestError) as again:
            sdk.messages.create(model="m", max_tokens=50, messages=messages)
        text_only = sdk.messages.create(
            model="m", max_tokens=50, messages=[{"role": "user", "content": "Sum it up."}]
        )
    assert len(fake.received) == 2  # the refused one, then the text-only one: never again
    assert fake.refused() == [True, False]
    assert text_only.content[0].type == "text"
    said = refuses(fake.bodies()[0], fake.received[0])
    assert said is not None
    upstream_words = orjson.loads(said[2])["error"]["message"]
    for error in (first.value, again.value):
        assert error.status_code == 400
        assert error.body["type"] == "error"
        assert error.body["error"]["type"] == "invalid_request_error"
        message = error.body["error"]["message"]
        assert message.startswith(
            "messages.0.content.0: a `document` block (a PDF) goes to a chat upstream as a "
            "`file` content part, which this upstream refuses for model 'm'"
        )
        assert message.endswith(
            "Send the document's text instead (a `text` document or a text block), or use a "
            "model that reads PDFs."
        )
    assert f"(it answered: {upstream_words})" in first.value.body["error"]["message"]
    assert "nothing was sent upstream this time" in again.value.body["error"]["message"]
    assert repairs(first.value.response.headers) == {"file_parts_learned": 1}
    assert repairs(again.value.response.headers) == {"file_parts_refused": 1}


def test_a_chat_client_gets_the_upstreams_own_refusal_then_the_proxys_at_once() -> None:
    """The chat door relays a refusal as the upstream sent it; what it taught still answers
    the next request with a file part at once, in OpenAI's shape, naming the part."""
    fake = RefusingUpstream(deepseek_parts)
    body = {"model": "m", "messages": [{"role": "user", "content": [FILE_PART]}]}
    headers = {"authorization": "Bearer sk-test"}
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        url = f"{proxy}/v1/chat/completions"
        first, again = (httpx.post(url, json=body, headers=headers, timeout=30) for _ in "12")
    assert len(fake.received) == 1
    refusal = deepseek_parts(body, fake.received[0])
    assert refusal is not None and first.content == refusal[2]  # as the upstream sent it
    assert again.status_code == 400
    error = again.json()["error"]
    assert error["code"] == "file_parts_refused"
    assert error["message"].startswith(
        "messages[0].content[0]: this upstream refuses a `file` content part for model 'm'"
    )
    assert repairs(again.headers) == {"file_parts_refused": 1}


# ── prompt-cache marks ───────────────────────────────────────────────────────


def claude_code(marked: bool = True) -> dict[str, Any]:
    given = claude_code_request()
    given["model"] = "m"
    given.pop("thinking")  # no reasoning asked of the fakes
    given.pop("output_config")
    return given if marked else without_marks(given)


TRANSLATED = {"messages_field_ignored": 1, "thinking_signature_dropped": 1}
"""What the front counts on the Claude Code request itself (context_management, the foreign
signature), beside what the repairs count."""


def post(proxy: str, body: dict[str, Any]) -> httpx.Response:
    headers = {**HEADERS, "anthropic-beta": CLAUDE_CODE_BETAS}
    return httpx.post(f"{proxy}/v1/messages", json=body, headers=headers, timeout=30)


def chat_of(body: dict[str, Any]) -> dict[str, Any]:
    """What the front makes of `body` (streamed: the proxy asks for usage too)."""
    return translate(copy.deepcopy(body), {"anthropic-beta": CLAUDE_CODE_BETAS}).body


def test_a_request_without_marks_goes_up_as_it_always_did() -> None:
    """The fixture is the chat request an unmarked Claude Code request became before marks
    were carried; through the proxy, to a host no profile knows, it still goes up so."""
    fake = accepting()
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        answer = post(proxy, claude_code(marked=False))
    assert answer.status_code == 200, answer.text
    expected = json.loads((FIXTURES / "claude_code_chat.json").read_text())
    expected["model"] = "m"
    del expected["reasoning_effort"]
    assert fake.received == [orjson.dumps(expected)]


def test_marks_reach_an_upstream_that_takes_them_where_openrouter_reads_them() -> None:
    """Before, every mark was dropped: the upstream's prompt cache never hit."""
    fake = accepting()
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        answer = post(proxy, claude_code())
        hour = {"type": "ephemeral", "ttl": "1h"}
        sdk = client(proxy).messages.with_raw_response.create(
            model="m",
            max_tokens=50,
            system=[{"type": "text", "text": "You are terse.", "cache_control": hour}],
            messages=[{"role": "user", "content": "hi"}],
        )
    assert answer.status_code == sdk.status_code == 200, answer.text
    assert repairs(answer.headers) == TRANSLATED and repairs(sdk.headers) == {}
    first, second = fake.bodies()
    assert first["messages"][0]["content"][1] == {
        "type": "text",
        "text": "You are Claude Code, Anthropic's official CLI for Claude.",
        "cache_control": {"type": "ephemeral"},
    }
    assert first["messages"][4] == {
        "role": "tool",
        "tool_call_id": "call_00_3dKpM1",
        "content": "hi",
        "cache_control": {"type": "ephemeral"},
    }
    assert second["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "You are terse.", "cache_control": hour}],
    }


@pytest.mark.parametrize("refuses", [groq_parts, deepseek_parts], ids=["groq", "deepseek"])
def test_an_upstream_refusing_marks_gets_them_dropped_once_and_from_then_on(
    refuses: Checker,
) -> None:
    """Groq refuses the system prompt as parts and any mark; DeepSeek the system prompt as
    parts. The resend is the request without marks, byte for byte, and so is the next one."""
    fake = RefusingUpstream(refuses)
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        learned, remembered = post(proxy, claude_code()), post(proxy, claude_code())
    assert learned.status_code == remembered.status_code == 200, learned.text
    assert fake.refused() == [True, False, False]
    unmarked = orjson.dumps({**chat_of(claude_code(marked=False)), "model": "m"})
    assert fake.received[1] == fake.received[2] == unmarked
    assert orjson.loads(fake.received[0]) == {**chat_of(claude_code()), "model": "m"}
    learned_kinds = {"cache_control_learned": 1, "cache_control_dropped": 3}
    assert repairs(learned.headers) == {**TRANSLATED, **learned_kinds}
    assert repairs(remembered.headers) == {**TRANSLATED, "cache_control_dropped": 3}


def test_the_profiles_that_refuse_marks_never_send_them() -> None:
    """DeepSeek's, Groq's and Cerebras's hosts drop them up front: no refusal to learn from."""
    fake = RefusingUpstream(deepseek_parts)
    with (
        running_refusing_upstream(fake) as base_url,
        running_proxy(base_url, **{"upstream.profile": "deepseek"}) as proxy,
    ):
        answer = post(proxy, claude_code())
    assert answer.status_code == 200, answer.text
    assert fake.refused() == [False]
    # The deepseek profile also counts the tool turn that came without its reasoning.
    dropped = {"cache_control_dropped": 3, "reasoning_content_missing": 1}
    assert repairs(answer.headers) == {**TRANSLATED, **dropped}
    assert orjson.loads(fake.received[0])["messages"][0]["content"] == (
        "Claude Code, headless.\n\nYou are Claude Code, Anthropic's official CLI for Claude."
        "\n\nYou are an interactive agent that helps users with software engineering tasks."
    )


def test_an_upstream_refusing_only_the_ttl_keeps_the_breakpoints() -> None:
    fake = RefusingUpstream(ttl_refused)
    hour = {"type": "ephemeral", "ttl": "1h"}
    system: Any = [{"type": "text", "text": "You are terse.", "cache_control": hour}]
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        sdk = client(proxy).messages.with_raw_response
        answers = [
            sdk.create(
                model="m", max_tokens=50, system=system, messages=[{"role": "user", "content": q}]
            )
            for q in ("hi", "again")
        ]
    assert [a.status_code for a in answers] == [200, 200]
    assert fake.refused() == [True, False, False]
    for body in fake.bodies()[1:]:
        assert body["messages"][0]["content"] == [
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
        ]
    assert repairs(answers[0].headers) == {
        "cache_control_learned": 1,
        "cache_control_ttl_dropped": 1,
    }
    assert repairs(answers[1].headers) == {"cache_control_ttl_dropped": 1}
