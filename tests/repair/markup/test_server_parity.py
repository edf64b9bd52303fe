"""Issue 27: model output the model servers' own tool parsers (vLLM's, SGLang's) read one way and
streamfix read another, one class of it per test. Each answer goes through the whole strict
chain streamed at several widths and non-streamed, and must come out as the servers read it
(or, where they disagree with each other, as the reading that loses nothing; each family's
docstring says which server does what)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from proxy.repair.tally import Tally
from tests.repair.markup.family_cases import DSML
from tests.repair.markup.test_family_streams import FORECAST, REQUEST, WEATHER, tool
from tests.support.phases import forwarded, phases
from tests.support.streams import assembled_calls, content, finish_reasons, repair_stream, sse

WIDTHS = (1, 3, 8, 10_000)

Calls = list[tuple[str, dict[str, Any]]]


def streamed(answer: str, request: dict[str, Any], width: int) -> tuple[Calls, str, list[str]]:
    """The calls, content and finish reasons the client sees, the answer streamed `width`
    characters a chunk and finishing with `stop`."""
    pieces = [answer[i : i + width] for i in range(0, len(answer), width)]
    chunks = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    body = repair_stream(sse(*chunks, finish, "[DONE]"), request)
    calls = [(c["name"], orjson.loads(c["arguments"])) for c in assembled_calls(body).get(0, [])]
    return calls, content(body).get(0, ""), finish_reasons(body)[0]


def whole(answer: str, request: dict[str, Any]) -> tuple[Calls, str, str]:
    """The same, non-streamed."""
    message = {"role": "assistant", "content": answer}
    body = {"id": "x", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    asyncio.run(phases().stream(forwarded(request), Tally("t")).on_response(body))
    choice = body["choices"][0]
    calls = [
        (c["function"]["name"], orjson.loads(c["function"]["arguments"]))
        for c in choice["message"].get("tool_calls") or ()
    ]
    return calls, choice["message"]["content"] or "", choice["finish_reason"]


def read_as(answer: str, calls: Calls, text: str, request: dict[str, Any] = REQUEST) -> None:
    """`answer` comes out as `calls` and the content `text`, however it is delivered."""
    finish = "tool_calls" if calls else "stop"
    for width in WIDTHS:
        assert streamed(answer, request, width) == (calls, text, [finish]), width
    assert whole(answer, request) == (calls, text, finish)


def stays_text(answer: str, request: dict[str, Any] = REQUEST) -> None:
    read_as(answer, [], answer, request)


PARIS = ("get_weather", {"city": "Paris"})
TOKYO = ("get_forecast", {"city": "Tokyo", "days": 3})


# ── an unclosed span at a normal finish ─────────────────────────────────────────────────


@pytest.mark.parametrize(
    "answer",
    [
        # GLM: vLLM's and SGLang's parsers find calls with `<tool_call>.*?</tool_call>` only.
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n",
        # MiniMax-M2: `<minimax:tool_call>(.*?)</minimax:tool_call>` only.
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
        "</parameter>\n</invoke>\n",
        # DeepSeek V3.2 DSML: `<|DSML|function_calls>(.*?)</|DSML|function_calls>` only.
        f'<{DSML}function_calls>\n<{DSML}invoke name="get_weather">\n<{DSML}parameter '
        f'name="city" string="true">Paris</{DSML}parameter>\n</{DSML}invoke>\n',
        # Kimi K2: each call needs its `<|tool_call_end|>` (both servers' call regexes).
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}',
    ],
    ids=["glm", "minimax_m2", "deepseek_dsml", "kimi_k2"],
)
def test_a_span_left_open_at_a_normal_finish_stays_text(answer: str) -> None:
    stays_text("Let me look.\n" + answer)


def test_a_kimi_section_whose_calls_closed_needs_no_section_end() -> None:
    # vLLM's and SGLang's Kimi parsers match the calls, not the section: its end is optional.
    answer = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
    )
    read_as(answer, [PARIS], "")


def test_a_mistral_call_after_a_complete_one_left_open_stays_text() -> None:
    # A second `[TOOL_CALLS]` whose arguments never close: the first call was whole and is
    # delivered (as under `length`); the open one goes out as the text it was.
    second = '[TOOL_CALLS]get_forecast[ARGS]{"city": "Tokyo", "days": '
    answer = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}' + second
    read_as(answer, [PARIS], second)


# ── harmony framing after a call ────────────────────────────────────────────────────────


def test_harmony_framing_after_a_call_is_removed_and_the_final_text_kept() -> None:
    answer = (
        "<|channel|>analysis<|message|>The user wants weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>'
        "<|start|>assistant<|channel|>final<|message|>Checking Paris now.<|return|>"
    )
    read_as(answer, [PARIS], "Checking Paris now.")


def test_harmony_framing_after_a_call_without_analysis_is_removed() -> None:
    answer = (
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": '
        '"Paris"}<|call|><|start|>assistant<|channel|>final<|message|>On it.'
    )
    read_as(answer, [PARIS], "On it.")


# ── Mistral's JSON list, "arguments" before "name" ──────────────────────────────────────


def test_mistral_list_with_arguments_before_the_name() -> None:
    answer = (
        '[TOOL_CALLS] [{"arguments": {"city": "Paris"}, "name": "get_weather"}, '
        '{"name": "get_forecast", "arguments": {"city": "Tokyo", "days": 3}}]'
    )
    read_as(answer, [PARIS, TOKYO], "")


def test_hermes_with_arguments_before_the_name() -> None:
    answer = '<tool_call>\n{"arguments": {"city": "Paris"}, "name": "get_weather"}\n</tool_call>'
    read_as(answer, [PARIS], "")


# ── bare values read against the schema ─────────────────────────────────────────────────

NOTE = tool(
    "set_note",
    {
        "text": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "tag": {"type": ["string", "null"]},
        "items": {
            "anyOf": [
                {"anyOf": [{"type": "array", "items": {"anyOf": [{"type": "string"}, {}]}}]},
                {"type": "null"},
            ]
        },
    },
)
NOTES = {"messages": [], "tools": [NOTE]}


@pytest.mark.parametrize(
    "answer",
    [
        "<tool_call>\n<function=set_note>\n<parameter=text>\nnull\n</parameter>\n"
        '<parameter=tag>\nnull\n</parameter>\n<parameter=items>\n[1, "a"]\n</parameter>\n'
        "</function>\n</tool_call>",
        '<minimax:tool_call>\n<invoke name="set_note">\n<parameter name="text">null</parameter>\n'
        '<parameter name="tag">null</parameter>\n<parameter name="items">[1, "a"]</parameter>\n'
        "</invoke>\n</minimax:tool_call>",
        "<tool_call>set_note\n<arg_key>text</arg_key>\n<arg_value>null</arg_value>\n"
        "<arg_key>tag</arg_key>\n<arg_value>null</arg_value>\n"
        '<arg_key>items</arg_key>\n<arg_value>[1, "a"]</arg_value>\n</tool_call>',
    ],
    ids=["qwen3_coder", "minimax_m2", "glm"],
)
def test_null_and_nested_any_of_are_read_by_the_schema(answer: str) -> None:
    read_as(answer, [("set_note", {"text": None, "tag": None, "items": [1, "a"]})], "", NOTES)


# ── whitespace inside a value ───────────────────────────────────────────────────────────

CODE = tool("write_file", {"path": {"type": "string"}, "content": {"type": "string"}})
FILES = {"messages": [], "tools": [CODE]}
INDENTED = "    def f():\n        return 1\n"


def test_glm_keeps_the_indentation_of_a_value() -> None:
    answer = (
        "<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>a.py</arg_value>\n"
        f"<arg_key>content</arg_key>\n<arg_value>{INDENTED}</arg_value>\n</tool_call>"
    )
    read_as(answer, [("write_file", {"path": "a.py", "content": INDENTED})], "", FILES)


# ── DeepSeek V3.2 DSML ──────────────────────────────────────────────────────────────────

PING = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}
DSML_REQUEST = {"messages": [], "tools": [WEATHER, FORECAST, PING]}


def dsml(*invokes: str) -> str:
    return f"<{DSML}function_calls>\n" + "".join(invokes) + f"</{DSML}function_calls>"


@pytest.mark.parametrize(
    ("invoke", "expected"),
    [
        (  # a single `arguments` wrapping the real arguments, as JSON text
            f'<{DSML}invoke name="get_forecast">\n<{DSML}parameter name="arguments" '
            f'string="false">{{"city": "Tokyo", "days": 3}}</{DSML}parameter>\n</{DSML}invoke>\n',
            TOKYO,
        ),
        (  # `input`, written as a string
            f'<{DSML}invoke name="get_weather">\n<{DSML}parameter name="input" '
            f'string="true">{{"city": "Paris"}}</{DSML}parameter>\n</{DSML}invoke>\n',
            PARIS,
        ),
        (  # an invoke whose body is the JSON arguments
            f'<{DSML}invoke name="get_weather">\n{{"city": "Paris"}}\n</{DSML}invoke>\n',
            PARIS,
        ),
        (  # a self-closing invoke, for a tool with no parameters
            f'<{DSML}invoke name="ping"/>\n',
            ("ping", {}),
        ),
    ],
    ids=["arguments_wrapper", "input_wrapper", "json_body", "self_closing"],
)
def test_deepseek_dsml_forms_the_servers_read(invoke: str, expected: Any) -> None:
    read_as("Checking.\n" + dsml(invoke), [expected], "Checking.\n", DSML_REQUEST)


def test_a_dsml_wrapper_the_schema_declares_is_kept() -> None:
    wrapped = tool("run", {"input": {"type": "string"}})
    request = {"messages": [], "tools": [wrapped]}
    answer = dsml(
        f'<{DSML}invoke name="run">\n<{DSML}parameter name="input" string="true">'
        f'{{"x": 1}}</{DSML}parameter>\n</{DSML}invoke>\n'
    )
    read_as(answer, [("run", {"input": '{"x": 1}'})], "", request)


# ── Llama 3 JSON: `<|python_tag|>` as the separator ─────────────────────────────────────


def test_llama_python_tag_between_calls() -> None:
    answer = (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'
        '<|python_tag|>{"name": "get_forecast", "parameters": {"city": "Tokyo", "days": 3}}'
    )
    read_as(answer, [PARIS, TOKYO], "")


# ── Kimi K2: noise between the section's begin and its first call ───────────────────────


def test_kimi_noise_before_the_first_call_is_dropped() -> None:
    answer = (
        "<|tool_calls_section_begin|>\nfunctions: <|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        "<|tool_calls_section_end|>"
    )
    read_as(answer, [PARIS], "")


# ── over-escaped output ─────────────────────────────────────────────────────────────────


def test_glm_with_literal_backslash_n_between_its_parts() -> None:
    # vLLM's and SGLang's GLM parsers accept a literal `\n` where the template puts a newline
    # after the name and between a key and its value.
    answer = (
        "<tool_call>get_forecast\\n<arg_key>city</arg_key>\\n<arg_value>Tokyo</arg_value>\\n"
        "<arg_key>days</arg_key>\\n<arg_value>3</arg_value>\\n</tool_call>"
    )
    read_as(answer, [TOKYO], "")
