"""The special-token families' markup (proxy/repair/markup/families/tokens.py), as their chat
templates or format guides write it: every case runs through the tests in test_families.py."""

from __future__ import annotations

from proxy.repair.markup.families import DeepSeek, Harmony, KimiK2
from proxy.repair.markup.spans import ParsedCall
from tests.repair.markup.family_cases import (
    DS_CALL,
    DS_CALL_END,
    DS_CALLS,
    DS_CALLS_END,
    DS_SEP,
    PARIS,
    Case,
)

CASES = [
    # Kimi K2's chat template / tool-call guide: several calls in one section.
    Case(
        "kimi_k2",
        KimiK2(),
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>"
        '{"tz": "UTC"}<|tool_call_end|><|tool_calls_section_end|>',
        "get_weather",
        "functions.get_weather:",
        [
            ParsedCall("get_weather", PARIS, id="functions.get_weather:0"),
            ParsedCall("get_time", {"tz": "UTC"}, id="functions.get_time:1"),
        ],
    ),
    # The singular section markers some Kimi K2 checkpoints write, ids without `functions.`.
    Case(
        "kimi_k2_singular",
        KimiK2(),
        "<|tool_call_section_begin|>",
        "<|tool_call_section_begin|>\n<|tool_call_begin|>get_weather:3"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>\n'
        "<|tool_call_section_end|>",
        "get_weather",
        "get_weather:",
        [ParsedCall("get_weather", PARIS, id="get_weather:3")],
    ),
    # DeepSeek-V3.1's chat template.
    Case(
        "deepseek_v31",
        DeepSeek(),
        DS_CALLS,
        f'{DS_CALLS}{DS_CALL}get_weather{DS_SEP}{{"city": "Paris"}}{DS_CALL_END}'
        f'{DS_CALL}get_time{DS_SEP}{{"tz": "UTC"}}{DS_CALL_END}{DS_CALLS_END}',
        "get_weather",
        f"get_weather{DS_SEP}",
        [ParsedCall("get_weather", PARIS), ParsedCall("get_time", {"tz": "UTC"})],
    ),
    # DeepSeek-V3 / R1's chat template: the type first, the JSON fenced.
    Case(
        "deepseek_v3",
        DeepSeek(),
        DS_CALLS,
        f"{DS_CALLS}{DS_CALL}function{DS_SEP}get_weather\n```json\n"
        f'{{"city": "Paris"}}\n```{DS_CALL_END}\n{DS_CALL}function{DS_SEP}get_time\n'
        f'```json\n{{"tz": "UTC"}}\n```{DS_CALL_END}{DS_CALLS_END}',
        "get_weather",
        "get_weather\n",
        [ParsedCall("get_weather", PARIS), ParsedCall("get_time", {"tz": "UTC"})],
    ),
    # V3.1 with a tool that is itself called `function`.
    Case(
        "deepseek_v31_named_function",
        DeepSeek(),
        DS_CALLS,
        f'{DS_CALLS}{DS_CALL}function{DS_SEP}{{"x": 1}}{DS_CALL_END}{DS_CALLS_END}',
        "function",
        f"function{DS_SEP}{{",
        [ParsedCall("function", {"x": 1})],
    ),
    # OpenAI's harmony format guide (gpt-oss): recipient after the channel, <|constrain|>.
    Case(
        "harmony_channel",
        Harmony(),
        "<|channel|>",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city":"Paris"}<|call|>',
        "get_weather",
        "get_weather ",
        [ParsedCall("get_weather", PARIS)],
    ),
    Case(
        "harmony_start",
        Harmony(),
        "<|start|>",
        "<|start|>assistant<|channel|>commentary to=functions.get_weather json<|message|>"
        '{"city": "Paris"}<|call|>',
        "get_weather",
        "get_weather ",
        [ParsedCall("get_weather", PARIS)],
    ),
    Case(
        "harmony_recipient_first",
        Harmony(),
        "<|start|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        '{"city": "Paris"}<|call|>',
        "get_weather",
        "get_weather<",
        [ParsedCall("get_weather", PARIS)],
    ),
]
