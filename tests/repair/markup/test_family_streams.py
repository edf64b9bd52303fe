"""Every family's markup through the recogniser and the whole chain, streamed with the markup
cut at every boundary, and non-streamed: the calls come out whole and valid, the text around
them stays content, in order, and the markup is gone."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from proxy.repair.tally import Tally
from tests.repair.markup.test_recogniser import cuts, recognise
from tests.support.phases import forwarded, phases
from tests.support.streams import assembled_calls, content, finish_reasons, repair_stream, sse


def tool(name: str, properties: dict) -> dict:
    schema = {"type": "object", "properties": properties, "required": sorted(properties)}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


WEATHER = tool("get_weather", {"city": {"type": "string"}})
FORECAST = tool("get_forecast", {"city": {"type": "string"}, "days": {"type": "integer"}})
PLAN = tool(
    "plan_trip",
    {
        "stops": {"type": "array", "items": {"type": "string"}},
        "options": {"type": "object", "properties": {"rail": {"type": "boolean"}}},
    },
)
CLOCK = tool("get_time", {})
REQUEST = {
    "messages": [{"role": "user", "content": "weather?"}],
    "tools": [WEATHER, FORECAST, PLAN, CLOCK],
}
PARIS = ("get_weather", {"city": "Paris"})


def ds(words: str) -> str:
    """DeepSeek's special tokens (`tool sep` and the like): fullwidth bars and U+2581."""
    return "<\uff5ctool\u2581" + words.replace(" ", "\u2581") + "\uff5c>"


TOKYO = ("get_forecast", {"city": "Tokyo", "days": 3})
DSML = "\uff5cDSML\uff5c"


def dsml(opener: str, closer: str, space: str = "") -> str:
    """A DSML block (DeepSeek V3.2 / V4 / V4.1), its tags spelled `<|DSML|{space}invoke`."""
    tag = DSML + space
    return (
        f'<{DSML}{opener}>\n<{tag}invoke name="get_weather">\n<{tag}parameter name="city" '
        f'string="true">Paris</{tag}parameter>\n</{tag}invoke>\n<{tag}invoke name="get_forecast">'
        f'\n<{tag}parameter name="city" string="true">Tokyo</{tag}parameter>\n<{tag}parameter '
        f'name="days" string="false">3</{tag}parameter>\n</{tag}invoke>\n</{DSML}{closer}>'
    )


# family -> (the markup as that family writes it, the calls in it). Each form is the one the
# family's chat template or tool-call guide documents (see test_families_*.py for the sources).
SAMPLES: dict[str, tuple[str, list[tuple[str, dict]]]] = {
    "hermes": (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_forecast", "arguments": {"city": "Tokyo", "days": 3}}\n'
        "</tool_call>",
        [PARIS, TOKYO],
    ),
    "qwen3_coder": (
        "<tool_call>\n<function=get_forecast>\n<parameter=city>\nTokyo\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        [TOKYO],
    ),
    # Qwen3.5 / 3.6 write Qwen3-Coder's XML, and leak it as text through servers whose parser
    # misses it streamed (Rapid-MLX's qwen3_coder on Qwen3.5-9B and Qwen3.6-35B-A3B, LM Studio,
    # Ollama before its qwen3.5 parser). The variants below are the ones vLLM's
    # qwen3coder_tool_parser and SGLang's qwen3_coder_detector tests read: parallel blocks, the
    # tags without the template's newlines, no `<tool_call>` wrapper, parameters left unclosed
    # (read up to the next parameter or `</function>`), JSON values read by the schema's types.
    "qwen35_parallel": (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>\n<tool_call>\n<function=get_forecast>\n<parameter=city>\n"
        "Tokyo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        [PARIS, TOKYO],
    ),
    "qwen35_compact": (
        "<tool_call><function=get_forecast><parameter=city>Tokyo</parameter>"
        "<parameter=days>3</parameter></function></tool_call>",
        [TOKYO],
    ),
    "qwen35_no_wrapper": (
        "<function=get_forecast>\n<parameter=city>\nTokyo\n</parameter>\n<parameter=days>\n3\n"
        "</parameter>\n</function>",
        [TOKYO],
    ),
    "qwen35_no_wrapper_closed": (
        "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        [PARIS],
    ),
    "qwen35_unclosed_parameters": (
        "<tool_call>\n<function=get_forecast>\n<parameter=city>\nTokyo\n<parameter=days>\n3\n"
        "</function>\n</tool_call>",
        [TOKYO],
    ),
    "qwen35_json_values": (
        '<tool_call>\n<function=plan_trip>\n<parameter=stops>\n["Paris", "Lyon"]\n'
        '</parameter>\n<parameter=options>\n{"rail": true}\n</parameter>\n</function>\n'
        "</tool_call>",
        [("plan_trip", {"stops": ["Paris", "Lyon"], "options": {"rail": True}})],
    ),
    "glm4_moe": (
        "<tool_call>get_forecast\n<arg_key>city</arg_key>\n<arg_value>Tokyo</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        [TOKYO],
    ),
    # GLM-4.7 / 5.x call a tool without parameters by its name alone, inline or with the
    # template's newline: vLLM's glm47 parser once crashed on it and its streaming parser dropped
    # it (vllm#32213, #32321, #44326), SGLang's glm47 detector missed the newline form (#15405).
    "glm5_zero_args": ("<tool_call>get_time</tool_call>", [("get_time", {})]),
    "glm5_zero_args_newline": ("<tool_call>get_time\n</tool_call>", [("get_time", {})]),
    "kimi_k2": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        "<|tool_call_begin|>functions.get_forecast:1"
        '<|tool_call_argument_begin|>{"city": "Tokyo", "days": 3}<|tool_call_end|>'
        "<|tool_calls_section_end|>",
        [PARIS, TOKYO],
    ),
    "deepseek_v31": (
        f"{ds('calls begin')}{ds('call begin')}get_weather{ds('sep')}"
        f'{{"city": "Paris"}}{ds("call end")}{ds("calls end")}',
        [PARIS],
    ),
    "deepseek_v3": (
        f"{ds('calls begin')}{ds('call begin')}function{ds('sep')}get_weather\n"
        f'```json\n{{"city": "Paris"}}\n```{ds("call end")}{ds("calls end")}',
        [PARIS],
    ),
    "mistral_json": (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
        '{"name": "get_forecast", "arguments": {"city": "Tokyo", "days": 3}}]',
        [PARIS, TOKYO],
    ),
    "mistral_args": ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', [PARIS]),
    "llama3_json": (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
        [PARIS],
    ),
    "llama3_bare_json": ('{"name": "get_weather", "parameters": {"city": "Paris"}}', [PARIS]),
    "pythonic": ('[get_weather(city="Paris"), get_forecast(city="Tokyo", days=3)]', [PARIS, TOKYO]),
    # DeepSeek V4's block as its encoder writes it, and the opener misspellings vLLM's
    # deepseek_v4 parser tolerates (`DSML_TOOL_START_VARIANTS`), closed by the canonical tag.
    "deepseek_v4_dsml": (dsml("tool_calls", "tool_calls"), [PARIS, TOKYO]),
    "deepseek_v4_toolcalls": (dsml("toolcalls", "tool_calls"), [PARIS, TOKYO]),
    "deepseek_v4_tool": (dsml("tool", "tool_calls"), [PARIS, TOKYO]),
    # DeepSeek V4.1's encoder: a space after the marker in every tag; the model drops it at
    # times, and falls back to V4's block (vLLM's deepseek_v41 parser reads all of these).
    "deepseek_v41_dsml": (dsml(" calls", " calls", space=" "), [PARIS, TOKYO]),
    "deepseek_v41_unspaced": (dsml("calls", " calls"), [PARIS, TOKYO]),
    "deepseek_v41_call": (dsml(" call", "tool_calls", space=" "), [PARIS, TOKYO]),
    "harmony": (
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city": "Paris"}<|call|>',
        [PARIS],
    ),
}
START_ONLY = {"llama3_json", "llama3_bare_json", "pythonic"}
"""Families recognised only when their markup opens the content."""


def framed(name: str) -> tuple[str, str, str]:
    markup = SAMPLES[name][0]
    if name in START_ONLY:
        return "", markup, ""
    return "Let me look.\n", markup, "\nOne moment."


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_family_is_recognised_at_every_split(name: str) -> None:
    before, markup, after = framed(name)
    expected = SAMPLES[name][1]
    answer = before + markup + after
    for pieces in cuts(answer):
        texts, calls, counts = recognise(pieces, request=REQUEST)
        got = [(call.name, orjson.loads(call.arguments)) for call in calls]
        assert got == expected, (name, pieces, counts)
        assert "".join(texts) == before + after.lstrip(), (name, pieces)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_family_streams_through_the_chain_as_calls(name: str) -> None:
    before, markup, after = framed(name)
    answer = before + markup + after
    for width in (1, 3, 8, len(answer)):
        pieces = [answer[i : i + width] for i in range(0, len(answer), width)]
        chunks = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
        finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        body = repair_stream(sse(*chunks, finish, "[DONE]"), REQUEST)
        calls = assembled_calls(body)[0]
        assert [(c["name"], orjson.loads(c["arguments"])) for c in calls] == SAMPLES[name][1]
        assert all(c["id"] for c in calls) and len({c["id"] for c in calls}) == len(calls)
        assert finish_reasons(body) == {0: ["tool_calls"]}
        assert content(body).get(0, "") == before + after.lstrip()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_family_non_streamed_becomes_message_calls(name: str) -> None:
    before, markup, after = framed(name)
    message = {"role": "assistant", "content": before + markup + after}
    body = {"id": "x", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    asyncio.run(phases().stream(forwarded(REQUEST), Tally("t")).on_response(body))
    choice = body["choices"][0]
    got = [
        (c["function"]["name"], orjson.loads(c["function"]["arguments"]))
        for c in choice["message"]["tool_calls"]
    ]
    assert got == SAMPLES[name][1]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == ((before + after.lstrip()) or None)


def test_a_mistral_call_gets_the_nine_alphanumerics_its_server_demands() -> None:
    body = repair_stream(
        sse(
            {"choices": [{"index": 0, "delta": {"content": SAMPLES["mistral_args"][0]}}]}, "[DONE]"
        ),
        REQUEST,
    )
    [call] = assembled_calls(body)[0]
    assert len(call["id"]) == 9 and call["id"].isalnum()


def test_kimi_keeps_the_ids_the_model_wrote() -> None:
    body = repair_stream(
        sse({"choices": [{"index": 0, "delta": {"content": SAMPLES["kimi_k2"][0]}}]}, "[DONE]"),
        REQUEST,
    )
    ids = [call["id"] for call in assembled_calls(body)[0]]
    assert ids == ["functions.get_weather:0", "functions.get_forecast:1"]


QWEN35_OPEN_LAST_BLOCK = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
)


def test_a_qwen35_last_block_left_open_at_the_end_is_a_call() -> None:
    """Qwen3.5 / 3.6 leave the last block without `</tool_call>` when the answer ends there:
    vLLM's qwen3coder_tool_parser reads it (`<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$`)."""
    answer = "Let me look.\n" + QWEN35_OPEN_LAST_BLOCK
    for width in (1, 3, 8, len(answer)):
        pieces = [answer[i : i + width] for i in range(0, len(answer), width)]
        chunks = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
        finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        body = repair_stream(sse(*chunks, finish, "[DONE]"), REQUEST)
        calls = [(c["name"], orjson.loads(c["arguments"])) for c in assembled_calls(body)[0]]
        assert calls == [PARIS], width
        assert finish_reasons(body) == {0: ["tool_calls"]}
        assert content(body) == {0: "Let me look.\n"}
    message = {"role": "assistant", "content": answer}
    body = {"id": "x", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    asyncio.run(phases().stream(forwarded(REQUEST), Tally("t")).on_response(body))
    choice = body["choices"][0]
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"]
    assert (choice["finish_reason"], choice["message"]["content"]) == (
        "tool_calls",
        "Let me look.\n",
    )
