"""The markup fake (tests/support/markup_upstream.py) over a real uvicorn, with httpx: what it
writes, how it cuts it, and that it turns away a follow-up whose history a chat template could
not render."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.repair.conformance import stream_chunks
from tests.support.markup_upstream import (
    FAMILIES,
    PARIS,
    PREFIX,
    MarkupUpstream,
    answer_for,
    final_answer,
    openai_tools,
    running_markup_upstream,
)

QUESTION = {"role": "user", "content": "What is the weather in Paris for three days?"}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[MarkupUpstream, str]]:
    with running_markup_upstream() as pair:
        yield pair


@pytest.fixture
def fake(served: tuple[MarkupUpstream, str]) -> MarkupUpstream:
    served[0].clear()
    return served[0]


@pytest.fixture
def client(served: tuple[MarkupUpstream, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[1], timeout=10) as client:
        yield client


def ask(client: httpx.Client, model: str, messages: list[Any], stream: bool) -> httpx.Response:
    body = {"model": model, "messages": messages, "stream": stream}
    return client.post("/chat/completions", json={**body, "tools": openai_tools("get_weather")})


def streamed(response: httpx.Response) -> tuple[list[str], list[str | None], bool]:
    """Content pieces, finish reasons, and whether the stream ended with [DONE]."""
    contents, finishes, done = [], [], False
    for item in stream_chunks(response.content):
        if item == "[DONE]":
            done = True
            continue
        assert isinstance(item, dict), item
        choice = item["choices"][0]
        if choice["delta"].get("content"):
            contents.append(choice["delta"]["content"])
        finishes.append(choice["finish_reason"])
    return contents, finishes, done


@pytest.mark.parametrize("family", FAMILIES)
def test_streams_the_markup_as_content_in_awkward_pieces(
    fake: MarkupUpstream, client: httpx.Client, family: str
) -> None:
    response = ask(client, family, [QUESTION], stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    contents, finishes, done = streamed(response)
    markup = answer_for(family).markup
    assert "".join(contents) == markup
    assert done and finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    # No piece holds a whole opener, nor the whole arguments object or value.
    opener = FAMILIES[family].markers[0]
    assert not any(opener in piece for piece in contents)
    assert not any("Paris" in piece for piece in contents)
    assert len(contents) > 15


@pytest.mark.parametrize("family", FAMILIES)
def test_non_streamed_answer_is_content_with_no_tool_calls(
    client: httpx.Client, family: str
) -> None:
    response = ask(client, f"{family}/prefixed", [QUESTION], stream=False)
    assert response.status_code == 200
    choice = response.json()["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "content": PREFIX + answer_for(family).markup,
        "tool_calls": [],
    }
    assert choice["finish_reason"] == "stop"


def test_the_families_write_what_the_brief_says() -> None:
    assert answer_for("hermes").markup == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
        "\n</tool_call>"
    )
    assert answer_for("qwen3_coder").markup == (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    assert answer_for("mistral/parallel").markup == (
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}'
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Tokyo", "days": 1}'
    )
    assert answer_for("deepseek").markup == (
        "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>"
        'get_weather<\uff5ctool\u2581sep\uff5c>{"city": "Paris", "days": 3}'
        "<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>"
    )
    assert answer_for("glm").markup == (
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
    )
    assert answer_for("minimax_m2").markup == (
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
        '</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n</minimax:tool_call>'
    )
    assert answer_for("kimi_k2/parallel").markup == (
        "<|tool_calls_section_begin|>"
        "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris", "days": 3}<|tool_call_end|>'
        "<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
        '{"city": "Tokyo", "days": 1}<|tool_call_end|>'
        "<|tool_calls_section_end|>"
    )


def _follow_up(family: str, assistant: dict[str, Any], answered: list[str]) -> list[Any]:
    tools = [{"role": "tool", "tool_call_id": i, "content": '{"sky": "clear"}'} for i in answered]
    return [QUESTION, {"role": "assistant", **assistant}, *tools]


def _call(call_id: str, arguments: Any = None, **changes: Any) -> dict[str, Any]:
    arguments = json.dumps(PARIS) if arguments is None else arguments
    call = {"id": call_id, "type": "function", "function": {"name": "get_weather"}}
    call["function"]["arguments"] = arguments
    return {**call, **changes}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_well_formed_follow_up_gets_text_from_the_tool_result(
    fake: MarkupUpstream, client: httpx.Client, family: str, stream: bool
) -> None:
    call_id = answer_for(family).call_id(0) or "abc123XYZ"  # 9 alphanumerics suit Mistral
    messages = _follow_up(family, {"content": None, "tool_calls": [_call(call_id)]}, [call_id])
    response = ask(client, family, messages, stream)
    assert response.status_code == 200, response.text
    if stream:
        contents, finishes, done = streamed(response)
        text = "".join(contents)
        assert done and finishes[-1] == "stop"
    else:
        text = response.json()["choices"][0]["message"]["content"]
    assert text == final_answer(['{"sky": "clear"}'])
    assert fake.rejections == []


BAD_HISTORIES = {
    # What an app sends back when nobody turned the markup into a call.
    "markup-as-content": (
        {"content": answer_for("hermes").markup},
        ["call_abc"],
        "no tool_calls",
    ),
    "markup-left-in-content": (
        {"content": answer_for("hermes").markup, "tool_calls": [_call("call_abc")]},
        ["call_abc"],
        "still holds the markup",
    ),
    "no-id": ({"tool_calls": [_call("")]}, [""], "id is missing"),
    "not-function": ({"tool_calls": [_call("c1", type="tool")]}, ["c1"], "not 'function'"),
    "arguments-object": (
        {"tool_calls": [_call("c1", arguments=PARIS)]},
        ["c1"],
        "is not a string",
    ),
    "arguments-not-json": (
        {"tool_calls": [_call("c1", arguments='{"city": "Par')]},
        ["c1"],
        "not a JSON object",
    ),
    "other-arguments": (
        {"tool_calls": [_call("c1", arguments='{"city": "Lyon", "days": 3}')]},
        ["c1"],
        "the model wrote",
    ),
    "unanswered-id": ({"tool_calls": [_call("c1")]}, ["c2"], "tool messages answer"),
}


@pytest.mark.parametrize(
    ("assistant", "answered", "says"), BAD_HISTORIES.values(), ids=BAD_HISTORIES
)
def test_a_follow_up_a_template_cannot_render_gets_an_openai_style_400(
    fake: MarkupUpstream,
    client: httpx.Client,
    assistant: dict[str, Any],
    answered: list[str],
    says: str,
) -> None:
    response = ask(client, "hermes", _follow_up("hermes", assistant, answered), stream=True)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert says in error["message"]
    assert len(fake.rejections) == 1


def test_mistral_follow_up_needs_nine_alphanumerics(
    fake: MarkupUpstream, client: httpx.Client
) -> None:
    messages = _follow_up("mistral", {"tool_calls": [_call("call_abc")]}, ["call_abc"])
    response = ask(client, "mistral", messages, stream=False)
    assert response.status_code == 400
    assert "is not of the form [a-zA-Z0-9]{9}" in response.json()["error"]["message"]


def test_kimi_follow_up_needs_the_id_the_model_wrote(
    fake: MarkupUpstream, client: httpx.Client
) -> None:
    messages = _follow_up("kimi_k2", {"tool_calls": [_call("call_abc")]}, ["call_abc"])
    response = ask(client, "kimi_k2", messages, stream=False)
    assert response.status_code == 400
    assert "the model wrote 'functions.get_weather:0'" in response.json()["error"]["message"]
