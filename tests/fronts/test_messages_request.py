"""The Messages request -> chat request translation (proxy/fronts/messages/request.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from proxy.fronts import receipt_tokens
from proxy.fronts.messages.request import MessagesError, effort_for_budget, translate
from proxy.fronts.messages.tool_use_ids import PREFIX, client_id, upstream_id


def request(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "max_tokens": 100, "messages": []}
    body.update(fields)
    return body


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def refused(body: Any, headers: dict[str, str] | None = None) -> MessagesError:
    with pytest.raises(MessagesError) as caught:
        translate(body, headers)
    return caught.value


EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def test_system_string_and_blocks_become_one_system_message() -> None:
    blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    for system, expected in (("sys", "sys"), (blocks, "a\n\nb")):
        chat = translate(request(system=system, messages=[user("hi")])).body
        assert chat["messages"] == [
            {"role": "system", "content": expected},
            {"role": "user", "content": "hi"},
        ]


def test_a_marked_system_prompt_is_text_parts_each_with_its_blocks_mark() -> None:
    """OpenRouter's chat API takes a mark on a system message's text part; one part per block
    keeps every breakpoint where the client put it."""
    blocks = [
        {"type": "text", "text": "a", "cache_control": HOUR},
        {"type": "text", "text": "b"},
        {"type": "text", "text": "c", "cache_control": EPHEMERAL},
    ]
    chat = translate(request(system=blocks, messages=[user("hi")])).body
    assert chat["messages"][0] == {
        "role": "system",
        "content": [
            {"type": "text", "text": "a", "cache_control": HOUR},
            {"type": "text", "text": "b"},
            {"type": "text", "text": "c", "cache_control": EPHEMERAL},
        ],
    }
    inside = [user("hi"), {"role": "system", "content": blocks[:2]}]
    assert translate(request(messages=inside)).body["messages"][1]["content"] == [
        {"type": "text", "text": "a", "cache_control": HOUR},
        {"type": "text", "text": "b"},
    ]


def test_marks_on_user_blocks_stay_on_their_parts() -> None:
    """A lone marked text is a part (a string carries no mark); an image and a document keep
    theirs; a mark that is not an object is no mark."""
    lone = translate(
        request(messages=[user([{"type": "text", "text": "q", "cache_control": HOUR}])])
    )
    assert lone.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": HOUR}]}
    ]
    not_a_mark = [{"type": "text", "text": "q", "cache_control": "ephemeral"}]
    assert translate(request(messages=[user(not_a_mark)])).body["messages"] == [user("q")]
    content = [
        {
            "type": "image",
            "source": {"type": "url", "url": "https://x/y.png"},
            "cache_control": EPHEMERAL,
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "d"},
            "cache_control": HOUR,
        },
        {"type": "text", "text": "q"},
    ]
    assert translate(request(messages=[user(content)])).body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}, "cache_control": EPHEMERAL},
        {"type": "text", "text": "d", "cache_control": HOUR},
        {"type": "text", "text": "q"},
    ]


def test_a_marked_tool_result_marks_its_tool_message_or_its_last_media() -> None:
    """OpenRouter's own provider marks a `tool` message beside its string content; the
    images and documents of a result end it where they went, in the user message."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
    image = {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
    for content, tool_message, parts in (
        ("hi", {"content": "hi", "cache_control": EPHEMERAL}, None),
        (
            [{"type": "text", "text": "see"}, image],
            {"content": "see"},
            [
                {
                    "type": "image_url",
                    "image_url": {"url": "https://x/y.png"},
                    "cache_control": EPHEMERAL,
                }
            ],
        ),
    ):
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": content}
        messages = [user("r"), assistant([call]), user([{**result, "cache_control": EPHEMERAL}])]
        sent = translate(request(messages=messages)).body["messages"][2:]
        assert sent[0] == {"role": "tool", "tool_call_id": "toolu_1", **tool_message}
        assert (sent[1]["content"] if parts else None) == parts


def test_an_assistant_turns_last_mark_marks_its_message() -> None:
    turn = [
        {"type": "text", "text": "ok", "cache_control": HOUR},
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "Read",
            "input": {},
            "cache_control": EPHEMERAL,
        },
    ]
    sent = translate(request(messages=[user("r"), assistant(turn)])).body["messages"][1]
    assert sent["content"] == "ok" and sent["cache_control"] == EPHEMERAL
    plain = translate(request(messages=[user("r"), assistant("ok")])).body["messages"][1]
    assert plain == {"role": "assistant", "content": "ok"}


def test_a_system_message_inside_messages_stays_in_place() -> None:
    """Claude Code sends one after the first user turn."""
    chat = translate(
        request(
            messages=[user("hi"), {"role": "system", "content": [{"type": "text", "text": "env"}]}]
        )
    ).body
    assert chat["messages"][1] == {"role": "system", "content": "env"}


def test_user_blocks_text_and_images() -> None:
    content = [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
    ]
    chat = translate(request(messages=[user(content)])).body
    assert chat["messages"][0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
    ]


def tool_turn() -> list[dict[str, Any]]:
    return [
        user("run it"),
        assistant(
            [
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo"}},
                {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {}},
            ]
        ),
        user(
            [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hi\n"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [{"type": "text", "text": "no such file"}],
                },
                {"type": "text", "text": "go on"},
            ]
        ),
    ]


def test_tool_use_and_tool_results_in_order() -> None:
    chat = translate(request(messages=tool_turn())).body
    assert chat["messages"][1:] == [
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": '{"command":"echo"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "Read", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "hi\n"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no such file"},
        {"role": "user", "content": "go on"},
    ]


def test_a_tool_result_for_an_id_never_issued_is_refused() -> None:
    messages = [user([{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}])]
    error = refused(request(messages=messages))
    assert error.status == 400
    assert error.body["type"] == "error"
    assert error.body["error"]["type"] == "invalid_request_error"
    assert "toolu_9" in error.body["error"]["message"]


def test_an_unknown_block_type_is_refused() -> None:
    error = refused(request(messages=[user([{"type": "container_upload", "file_id": "f"}])]))
    assert "container_upload" in error.body["error"]["message"]
    error = refused(request(messages=[assistant([{"type": "server_tool_use", "id": "x"}])]))
    assert "server_tool_use" in error.body["error"]["message"]


def test_missing_required_fields_are_refused() -> None:
    assert "max_tokens" in refused({"model": "m", "messages": []}).body["error"]["message"]
    assert "model" in refused({"max_tokens": 1, "messages": []}).body["error"]["message"]
    assert refused([]).status == 400


def test_tools_and_tool_choice() -> None:
    tools = [
        {
            "name": "Bash",
            "description": "run",
            "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral"},
        }
    ]
    expected_tools = [
        {
            "type": "function",
            "function": {"name": "Bash", "description": "run", "parameters": {"type": "object"}},
            "cache_control": {"type": "ephemeral"},  # where OpenRouter's tool caching reads it
        }
    ]
    cases = {
        "auto": "auto",
        "any": "required",
        "none": "none",
    }
    for kind, chat_choice in cases.items():
        chat = translate(request(tools=tools, tool_choice={"type": kind})).body
        assert chat["tools"] == expected_tools
        assert chat["tool_choice"] == chat_choice
    chat = translate(
        request(
            tools=tools,
            tool_choice={"type": "tool", "name": "Bash", "disable_parallel_tool_use": True},
        )
    ).body
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "Bash"}}
    assert chat["parallel_tool_calls"] is False


def test_server_tools_are_refused() -> None:
    error = refused(request(tools=[{"type": "web_search_20250305", "name": "web_search"}]))
    assert "web_search_20250305" in error.body["error"]["message"]


def test_sampling_limits_and_metadata() -> None:
    chat = translate(
        request(
            temperature=0.2,
            top_p=0.9,
            top_k=40,
            stop_sequences=["END"],
            metadata={"user_id": "u1"},
            stream=True,
        )
    ).body
    assert chat["max_tokens"] == 100
    assert (chat["temperature"], chat["top_p"], chat["top_k"]) == (0.2, 0.9, 40)
    assert chat["stop"] == ["END"]
    assert chat["user"] == "u1"
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}
    assert "stream" not in translate(request()).body


def test_thinking_budget_becomes_an_effort() -> None:
    assert effort_for_budget(1024) == "low"
    assert effort_for_budget(8000) == "medium"
    assert effort_for_budget(32000) == "high"
    chat = translate(request(thinking={"type": "enabled", "budget_tokens": 2048})).body
    assert chat["reasoning_effort"] == "low"
    # Claude Code: adaptive thinking with output_config.effort
    chat = translate(request(thinking={"type": "adaptive"}, output_config={"effort": "high"})).body
    assert chat["reasoning_effort"] == "high"
    assert "output_config" not in chat
    plain = translate(request(thinking={"type": "adaptive"}))
    assert "reasoning_effort" not in plain.body
    assert plain.counts["thinking_dropped"] == 1
    assert "reasoning_effort" not in translate(request(thinking={"type": "disabled"})).body


def test_structured_output_becomes_a_json_schema_response_format() -> None:
    """Claude Code's session-title request: output_config carries its effort and a format."""
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": False,
    }
    expected = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    fmt = {"type": "json_schema", "schema": schema}
    titled = translate(request(output_config={"effort": "high", "format": fmt}))
    assert titled.body["response_format"] == expected
    assert titled.counts == {}  # the format was read: output_config is not ignored
    beta = translate(request(output_format=fmt)).body  # the structured-outputs beta's field
    assert beta["response_format"] == expected
    assert "response_format" not in translate(request(output_config={"effort": "low"})).body
    for bad in ({"type": "json_object"}, {"type": "json_schema"}, "json"):
        error = refused(request(output_config={"format": bad}))
        assert error.body["error"]["message"].startswith("output_config.format:")


def test_betas_by_table() -> None:
    claude_code = (
        "claude-code-20250219, interleaved-thinking-2025-05-14, context-management-2025-06-27,"
        " effort-2025-11-24"
    )
    assert translate(request(), {"anthropic-beta": claude_code}).counts == {}
    unknown = translate(request(), {"anthropic-beta": "something-new-2030-01-01"})
    assert unknown.counts == {"anthropic_beta_unknown": 1}
    error = refused(request(), {"anthropic-beta": "code-execution-2025-05-22"})
    assert "code-execution-2025-05-22" in error.body["error"]["message"]


def test_refused_fields() -> None:
    assert "mcp_servers" in refused(request(mcp_servers=[{"url": "x"}])).body["error"]["message"]


def test_thinking_signature_read_back_or_dropped() -> None:
    scope = "tenant:upstream"
    token = receipt_tokens.mint(scope, "turn:abc")
    tampered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]

    def read(signature: str) -> str | None:
        return receipt_tokens.read(signature, scope)

    def turn(signature: str) -> list[dict[str, Any]]:
        return [
            user("q"),
            assistant(
                [
                    {"type": "thinking", "thinking": "hmm", "signature": signature},
                    {"type": "text", "text": "a"},
                ]
            ),
            user("more"),
        ]

    kept = translate(request(messages=turn(token)), read_token=read)
    assert kept.receipt_keys == {1: "turn:abc"}
    assert kept.counts == {}
    assert kept.body["messages"][1] == {"role": "assistant", "content": "a"}
    for bad in (tampered, "EqQBCkYIBxgCKkA-anthropic-signature", ""):
        dropped = translate(request(messages=turn(bad)), read_token=read)
        assert dropped.receipt_keys == {}
        assert dropped.counts == {"thinking_signature_dropped": 1}
    other_tenant = translate(
        request(messages=turn(token)), read_token=lambda s: receipt_tokens.read(s, "other:up")
    )
    assert other_tenant.counts == {"thinking_signature_dropped": 1}
    redacted = [user("q"), assistant([{"type": "redacted_thinking", "data": "x"}]), user("y")]
    assert translate(request(messages=redacted)).counts == {"thinking_signature_dropped": 1}


FIXTURES = Path(__file__).parent / "fixtures"
CLAUDE_CODE_BETAS = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,"
    "advanced-tool-use-2025-11-20,effort-2025-11-24,thinking-display-updates-2026-08-18"
)


def without_marks(value: Any) -> Any:
    """`value` with every `cache_control` taken out, at any depth."""
    if isinstance(value, dict):
        return {k: without_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_marks(item) for item in value]
    return value


def claude_code_request() -> dict[str, Any]:
    return json.loads((FIXTURES / "claude_code_request.json").read_text())


def test_golden_a_claude_code_request() -> None:
    """A request shaped as Claude Code 2.1.332 sends it (shared/MESSAGES.md): system blocks with
    cache_control, a system message inside messages, adaptive thinking with output_config's
    effort, context_management, a thinking block signed by Anthropic (foreign here), a tool_use /
    tool_result pair with cache_control, schemas with $schema and exclusiveMinimum (the route's
    schema rules deal with those later, as for a chat client), a deferred placeholder tool. The
    marks go where OpenRouter reads them: the system prompt as one text part per block, the
    tool result's on its `tool` message; the rest is what the request without them becomes."""
    translated = translate(claude_code_request(), {"anthropic-beta": CLAUDE_CODE_BETAS})
    expected = json.loads((FIXTURES / "claude_code_chat.json").read_text())
    expected["messages"][0]["content"] = [
        {"type": "text", "text": "Claude Code, headless."},
        {
            "type": "text",
            "text": "You are Claude Code, Anthropic's official CLI for Claude.",
            "cache_control": {"type": "ephemeral"},
        },
        {
            "type": "text",
            "text": "You are an interactive agent that helps users with software engineering "
            "tasks.",
            "cache_control": {"type": "ephemeral"},
        },
    ]
    expected["messages"][4]["cache_control"] = {"type": "ephemeral"}
    assert translated.body == expected
    assert translated.counts == {"thinking_signature_dropped": 1, "messages_field_ignored": 1}


def test_without_marks_the_claude_code_request_becomes_what_it_always_did() -> None:
    """The fixture is the chat request this translation made before marks were carried: a
    request without them goes up byte for byte as it did."""
    unmarked = without_marks(claude_code_request())
    translated = translate(unmarked, {"anthropic-beta": CLAUDE_CODE_BETAS})
    assert json.dumps(translated.body) == json.dumps(
        json.loads((FIXTURES / "claude_code_chat.json").read_text())
    )


PDF_DATA = "JVBERi0xLjQK"  # "%PDF-1.4\n"


def pdf(**fields: Any) -> dict[str, Any]:
    source = {"type": "base64", "media_type": "application/pdf", "data": PDF_DATA}
    return {"type": "document", "source": source, **fields}


def test_a_pdf_is_a_chat_file_part_named_by_its_title() -> None:
    """OpenAI's chat file part, which OpenRouter takes for every model; the block's place is
    kept to name it should the upstream refuse the part."""
    translated = translate(request(messages=[user([pdf(), {"type": "text", "text": "sum up"}])]))
    assert translated.body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "file",
                    "file": {
                        "filename": "document.pdf",
                        "file_data": f"data:application/pdf;base64,{PDF_DATA}",
                    },
                },
                {"type": "text", "text": "sum up"},
            ],
        }
    ]
    assert translated.documents == ["messages.0.content.0"]
    titled = pdf(title="report.pdf", context="Q3 figures", cache_control=EPHEMERAL)
    parts = translate(request(messages=[user([titled])])).body["messages"][0]["content"]
    assert parts == [
        {"type": "text", "text": "report.pdf\nQ3 figures"},
        {
            "type": "file",
            "file": {
                "filename": "report.pdf",
                "file_data": f"data:application/pdf;base64,{PDF_DATA}",
            },
            "cache_control": EPHEMERAL,
        },
    ]


def test_each_document_source_becomes_its_parts() -> None:
    url = {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}
    text = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "plain words"},
        "title": "notes",
        "citations": {"enabled": True},
    }
    image = {"type": "image", "source": {"type": "url", "url": "https://x/p.png"}}
    content = {
        "type": "document",
        "source": {"type": "content", "content": [{"type": "text", "text": "one"}, image]},
    }
    said = {"type": "document", "source": {"type": "content", "content": "two"}}
    translated = translate(request(messages=[user([url, text, content, said])]))
    assert translated.body["messages"][0]["content"] == [
        {"type": "file", "file": {"filename": "document.pdf", "file_data": "https://x/a.pdf"}},
        {"type": "text", "text": "notes"},
        {"type": "text", "text": "plain words"},
        {"type": "text", "text": "one"},
        {"type": "image_url", "image_url": {"url": "https://x/p.png"}},
        {"type": "text", "text": "two"},
    ]
    assert translated.documents == ["messages.0.content.0"]
    # The answer carries no citations: enabled ones are counted as ignored.
    assert translated.counts == {"messages_field_ignored": 1}


def test_documents_the_proxy_cannot_send_are_refused_naming_why() -> None:
    files_api = {"type": "document", "source": {"type": "file", "file_id": "file_011"}}
    assert "Files API" in refused(request(messages=[user([files_api])])).body["error"]["message"]
    word = pdf()
    word["source"]["media_type"] = "application/msword"
    error = refused(request(messages=[user([word])])).body["error"]["message"]
    assert error.startswith("messages.0.content.0.source.media_type: Input should be")
    unknown = {"type": "document", "source": {"type": "s3", "key": "k"}}
    assert (
        "base64, url, text or content"
        in refused(request(messages=[user([unknown])])).body["error"]["message"]
    )


def test_claude_codes_read_of_a_pdf_follows_its_tool_result_as_a_user_part() -> None:
    """Claude Code's Read tool answers a PDF as a document block inside the tool_result; a chat
    `tool` message takes text only (OpenAI's schema, OpenRouter's), so the file follows in the
    user message, as an image in a result does, and the result's mark ends it there."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a.pdf"}}
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [pdf()],
        "cache_control": EPHEMERAL,
    }
    translated = translate(
        request(messages=[user("read a.pdf"), assistant([call]), user([result])])
    )
    assert translated.body["messages"][2:] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": ""},
        {
            "role": "user",
            "content": [
                {
                    "type": "file",
                    "file": {
                        "filename": "document.pdf",
                        "file_data": f"data:application/pdf;base64,{PDF_DATA}",
                    },
                    "cache_control": EPHEMERAL,
                }
            ],
        },
    ]
    assert translated.documents == ["messages.2.content.0.content.0"]


# ── call ids the front wrote in Anthropic's alphabet ─────────────────────────


@pytest.mark.parametrize(
    "upstream",
    [
        "functions.get_weather:0",  # Kimi
        "functions.mcp__fs__read_text_file:12",
        "call_abc-123",  # in the alphabet: as it came
        "toolu_01A09q90qw90lq917835lq9",  # Anthropic's own
        "toolu_sf_ZnVuY3Rpb25z",  # in the alphabet but with the front's prefix: written too
        "chatcmpl-tool-9f1c/2",
        "呼び出し:1",
    ],
)
def test_every_upstream_id_comes_back_from_the_id_the_client_was_given(upstream: str) -> None:
    given = client_id(upstream)
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", given)
    in_alphabet = re.fullmatch(r"[a-zA-Z0-9_-]+", upstream) is not None
    assert (given == upstream) == (in_alphabet and not upstream.startswith(PREFIX))
    assert upstream_id(given) == upstream


def test_an_id_that_only_looks_written_by_the_front_goes_as_sent() -> None:
    for given in ("toolu_sf_", "toolu_sf_!!", "toolu_sf_YWJj", "toolu_sf_gA"):
        # "YWJj" is "abc", which the front gives as it is; "gA" is no UTF-8.
        assert upstream_id(given) == given


def test_the_history_goes_upstream_with_the_upstreams_own_ids() -> None:
    kimi = "functions.get_weather:0"
    given = client_id(kimi)
    call = {"type": "tool_use", "id": given, "name": "get_weather", "input": {"city": "Paris"}}
    plain = {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}}
    translated = translate(
        request(
            messages=[
                user("weather?"),
                assistant([call, plain]),
                user(
                    [
                        {"type": "tool_result", "tool_use_id": given, "content": "sunny"},
                        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "noon"},
                    ]
                ),
            ]
        )
    )
    messages = translated.body["messages"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == [kimi, "toolu_2"]
    assert [m["tool_call_id"] for m in messages[2:]] == [kimi, "toolu_2"]
    assert translated.counts == {"messages_tool_use_id_restored": 2}
