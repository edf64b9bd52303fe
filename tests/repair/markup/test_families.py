"""Each family's markup, as its chat template or its serving layer's parser writes it: the name
on every prefix, the end on every prefix, the parsed calls, and the near-misses it must refuse."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.repair.markup.families import (
    FAMILIES,
    DeepSeek,
    DeepSeekDsml,
    Glm,
    Harmony,
    Hermes,
    KimiK2,
    LlamaFunction,
    LlamaJson,
    MiniMaxM2,
    Mistral,
    Pythonic,
    Qwen3Coder,
)
from proxy.repair.markup.spans import REFUSED, MarkupFamily, ParsedCall

DS_CALLS = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
DS_CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
DS_CALL = "<\uff5ctool\u2581call\u2581begin\uff5c>"
DS_CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
DS_SEP = "<\uff5ctool\u2581sep\uff5c>"
DSML = "\uff5cDSML\uff5c"

PARIS = {"city": "Paris"}


@dataclass(frozen=True)
class Case:
    id: str
    family: MarkupFamily
    opener: str
    span: str
    name: str
    whole_after: str
    """The name is whole once the span shows this text (its first occurrence) entirely."""
    calls: list[ParsedCall]

    @property
    def name_at(self) -> int:
        return self.span.index(self.whole_after) + len(self.whole_after)


CASES = [
    # Qwen2.5 / Qwen3 chat templates (Hermes-style tool calls).
    Case(
        "hermes",
        Hermes(),
        "<tool_call>",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        "get_weather",
        '"get_weather"',
        [ParsedCall("get_weather", PARIS)],
    ),
    # A JSON string quoting the closing tag does not end the span.
    Case(
        "hermes_quoted_closer",
        Hermes(),
        "<tool_call>",
        '<tool_call>{"name": "write", "arguments": {"text": "a </tool_call> b"}}</tool_call>',
        "write",
        '"write"',
        [ParsedCall("write", {"text": "a </tool_call> b"})],
    ),
    # Qwen3-Coder's chat template.
    Case(
        "qwen3_coder",
        Qwen3Coder(),
        "<tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        "get_weather",
        "<function=get_weather>\n<parameter=",
        [ParsedCall("get_weather", {"city": "Paris", "days": "3"}, strings=True)],
    ),
    # Only the template's one newline on each side goes; inner newlines stay.
    Case(
        "qwen3_coder_multiline",
        Qwen3Coder(),
        "<tool_call>",
        "<tool_call>\n<function=write_file>\n<parameter=content>\n\nline 1\nline 2\n\n"
        "</parameter>\n</function>\n</tool_call>",
        "write_file",
        "<function=write_file>\n<parameter=",
        [ParsedCall("write_file", {"content": "\nline 1\nline 2\n"}, strings=True)],
    ),
    # Qwen3-Coder without the opening <tool_call> (its servers read the bare form too); the
    # closing tag it still writes belongs to the span.
    Case(
        "qwen3_coder_bare",
        Qwen3Coder(),
        "<function=",
        "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        "get_weather",
        "<function=get_weather>\n<parameter=",
        [ParsedCall("get_weather", PARIS, strings=True)],
    ),
    Case(
        "qwen3_coder_bare_no_arguments",
        Qwen3Coder(),
        "<function=",
        "<function=get_time>\n</function>",
        "get_time",
        "</function>",
        [ParsedCall("get_time", {}, strings=True)],
    ),
    # GLM-4.5 / 4.6 chat template.
    Case(
        "glm45",
        Glm(),
        "<tool_call>",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
        "get_weather",
        "get_weather\n<arg_key>",
        [ParsedCall("get_weather", {"city": "Paris", "days": "3"}, strings=True)],
    ),
    # GLM-4.7 chat template: no newlines.
    Case(
        "glm47",
        Glm(),
        "<tool_call>",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
        "get_weather",
        "get_weather<arg_key>",
        [ParsedCall("get_weather", PARIS, strings=True)],
    ),
    Case(
        "glm_no_arguments",
        Glm(),
        "<tool_call>",
        "<tool_call>get_time\n</tool_call>",
        "get_time",
        "</tool_call>",
        [ParsedCall("get_time", {}, strings=True)],
    ),
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
    # DeepSeek V3.2's encoding script (encoding_dsv32.py): the model types each value.
    Case(
        "deepseek_dsml",
        DeepSeekDsml(),
        f"<{DSML}function_calls>",
        f'<{DSML}function_calls>\n<{DSML}invoke name="get_weather">\n'
        f'<{DSML}parameter name="city" string="true">Paris</{DSML}parameter>\n'
        f'<{DSML}parameter name="days" string="false">3</{DSML}parameter>\n'
        f'<{DSML}parameter name="hours" string="false">[6, 18]</{DSML}parameter>\n'
        f'</{DSML}invoke>\n<{DSML}invoke name="get_time">\n'
        f'<{DSML}parameter name="tz" string="true">UTC</{DSML}parameter>\n'
        f"</{DSML}invoke>\n</{DSML}function_calls>",
        "get_weather",
        '"get_weather"',
        [
            ParsedCall("get_weather", {"city": "Paris", "days": 3, "hours": [6, 18]}),
            ParsedCall("get_time", {"tz": "UTC"}),
        ],
    ),
    # Later DeepSeek encodings name the block tool_calls.
    Case(
        "deepseek_dsml_tool_calls",
        DeepSeekDsml(),
        f"<{DSML}tool_calls>",
        f'<{DSML}tool_calls>\n<{DSML}invoke name="get_weather">\n'
        f'<{DSML}parameter name="city" string="true">Paris</{DSML}parameter>\n'
        f"</{DSML}invoke>\n</{DSML}tool_calls>",
        "get_weather",
        '"get_weather"',
        [ParsedCall("get_weather", PARIS)],
    ),
    # mistral-common's chat templates before tokenizer v11 (Mistral 7B v0.3, Nemo): a list.
    Case(
        "mistral_list",
        Mistral(),
        "[TOOL_CALLS]",
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"},'
        ' {"name": "get_time", "arguments": {"tz": "UTC"}}]',
        "get_weather",
        '"get_weather"',
        [
            ParsedCall("get_weather", PARIS, id="abc123XYZ"),
            ParsedCall("get_time", {"tz": "UTC"}),
        ],
    ),
    # mistral-common's chat templates, tokenizer v11+ (Mistral Small 3.2, Devstral).
    Case(
        "mistral_v11",
        Mistral(),
        "[TOOL_CALLS]",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        "get_weather",
        "get_weather[ARGS]",
        [ParsedCall("get_weather", PARIS)],
    ),
    # ... in the tokenizer versions that carry call ids.
    Case(
        "mistral_call_id",
        Mistral(),
        "[TOOL_CALLS]",
        '[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{"city": "Paris"}',
        "get_weather",
        "get_weather[CALL_ID]",
        [ParsedCall("get_weather", PARIS, id="abc123XYZ")],
    ),
    # v11 decoded with `[ARGS]` skipped as a control token (vLLM's Mistral parser reads it).
    Case(
        "mistral_bare",
        Mistral(),
        "[TOOL_CALLS]",
        '[TOOL_CALLS]get_weather{"city": "Paris"}',
        "get_weather",
        "get_weather{",
        [ParsedCall("get_weather", PARIS)],
    ),
    # Llama 3.1 / 3.2 / 3.3 prompt format (JSON tool calling), several joined by `;`.
    Case(
        "llama_json",
        LlamaJson(),
        "{",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}; '
        '{"name": "get_time", "arguments": {"tz": "UTC"}}',
        "get_weather",
        '"get_weather"',
        [ParsedCall("get_weather", PARIS), ParsedCall("get_time", {"tz": "UTC"})],
    ),
    # Llama 4 Scout on the Llama 3.1 JSON template leads with "type" (vllm-project/vllm#46863).
    Case(
        "llama_python_tag_type",
        LlamaJson(),
        "<|python_tag|>",
        '<|python_tag|>{"type": "function", "name": "get_weather", '
        '"parameters": {"city": "Paris"}}',
        "get_weather",
        '"get_weather"',
        [ParsedCall("get_weather", PARIS)],
    ),
    # Meta's Llama 3.1 prompt format, custom tools.
    Case(
        "llama_function",
        LlamaFunction(),
        "<function=",
        '<function=get_weather>{"city": "Paris", "note": "</function>"}</function>',
        "get_weather",
        "<function=get_weather>{",
        [ParsedCall("get_weather", {"city": "Paris", "note": "</function>"})],
    ),
    # Llama 3.2 / 4 and ToolACE pythonic format.
    Case(
        "pythonic",
        Pythonic(),
        "[",
        "[get_weather(city=\"Paris\", days=3, units=None), get_time(tz='UTC', dst=True, "
        'offsets=[-1, 2.5], extra={"a": "]"})]',
        "get_weather",
        "get_weather(",
        [
            ParsedCall("get_weather", {"city": "Paris", "days": 3, "units": None}),
            ParsedCall(
                "get_time", {"tz": "UTC", "dst": True, "offsets": [-1, 2.5], "extra": {"a": "]"}}
            ),
        ],
    ),
    # Llama 4 wraps it in its python tokens.
    Case(
        "pythonic_llama4",
        Pythonic(),
        "<|python_start|>",
        '<|python_start|>[get_weather(city="Paris")]<|python_end|>',
        "get_weather",
        "get_weather(",
        [ParsedCall("get_weather", PARIS)],
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
    # MiniMax-M2's chat template: several invokes in one block.
    Case(
        "minimax_m2",
        MiniMaxM2(),
        "<minimax:tool_call>",
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>'
        '\n<parameter name="days">3</parameter>\n</invoke>\n<invoke name="get_time">\n'
        '<parameter name="tz">UTC</parameter>\n</invoke>\n</minimax:tool_call>',
        "get_weather",
        '"get_weather"',
        [
            ParsedCall("get_weather", {"city": "Paris", "days": "3"}, strings=True),
            ParsedCall("get_time", {"tz": "UTC"}, strings=True),
        ],
    ),
]

TRAILING = " The weather is fine."


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_name_on_every_prefix(case: Case) -> None:
    assert case.span.startswith(case.opener)
    for length in range(len(case.opener), len(case.span) + 1):
        expected = case.name if length >= case.name_at else None
        assert case.family.name(case.span[:length], case.opener) == expected, length
    assert case.family.name(case.span + TRAILING, case.opener) == case.name


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_end_on_every_prefix(case: Case) -> None:
    for length in range(len(case.opener), len(case.span)):
        assert case.family.end(case.span[:length], case.opener, False) is None, length
    assert case.family.end(case.span + TRAILING, case.opener, False) == len(case.span)
    assert case.family.end(case.span + TRAILING, case.opener, True) == len(case.span)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_an_end_is_always_a_span_that_parses(case: Case) -> None:
    """Whenever `end` answers, on any prefix and whether or not the stream ended, the span it
    marks parses: the recogniser never cuts a span the family cannot read."""
    answered = 0
    for length in range(len(case.opener), len(case.span) + 1):
        prefix = case.span[:length]
        for final in (False, True):
            end = case.family.end(prefix, case.opener, final)
            if end is not None:
                answered += 1
                assert end <= length
                assert case.family.calls(prefix[:end], case.opener) is not None, (length, final)
    assert answered  # the whole span, at least, once the stream ended


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_calls(case: Case) -> None:
    assert case.family.calls(case.span, case.opener) == case.calls


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_exactly_one_family_names_the_span(case: Case) -> None:
    """Every family whose opener the span starts with is asked (`<tool_call>` and `<function=`
    are shared, `[` opens `[TOOL_CALLS]` too): only the span's own family names it."""
    naming = [
        (f.family, opener)
        for f in FAMILIES
        for opener in f.openers
        if case.span.startswith(opener) and isinstance(f.name(case.span, opener), str)
    ]
    assert naming == [(case.family.family, case.opener)]


UNCLOSED = [
    c
    for c in CASES
    if c.family.family not in ("mistral", "llama_json", "pythonic")
    and c.id != "glm_no_arguments"
    and not c.id.startswith("qwen3_coder_bare")
]


@pytest.mark.parametrize("case", UNCLOSED, ids=lambda c: c.id)
def test_final_without_closing_marker(case: Case) -> None:
    """The model stopped at its end-of-turn token before the closing marker: the span ends
    there when what came is complete, and not while a call is cut short."""
    closers = (*getattr(case.family, "closers", ()), "<|call|>", "</function>")
    closer = next(c for c in closers if c in case.span)
    cut = case.span[: case.span.rindex(closer)]  # the last one: a value may quote it
    assert case.family.end(cut, case.opener, False) is None
    assert case.family.end(cut, case.opener, True) == len(cut)
    assert case.family.calls(cut, case.opener) == case.calls
    assert case.family.end(cut[:-3], case.opener, True) is None


def test_qwen3_coder_bare_function_waits_for_a_closing_tool_call() -> None:
    bare = "<function=f>\n<parameter=a>\n1\n</parameter>\n</function>"
    assert Qwen3Coder().end(bare + "\n", "<function=", False) is None
    assert Qwen3Coder().end(bare + "\n</tool", "<function=", False) is None
    assert Qwen3Coder().end(bare + "\n", "<function=", True) == len(bare)
    assert Qwen3Coder().end(bare + "\nDone.", "<function=", False) == len(bare)
    assert Qwen3Coder().end(bare[:-3], "<function=", True) is None
    assert Qwen3Coder().calls(bare, "<function=") == [ParsedCall("f", {"a": "1"}, strings=True)]


def test_glm_unclosed_name_alone_is_not_a_call() -> None:
    assert Glm().end("<tool_call>get_time\n", "<tool_call>", True) is None
    assert Glm().end("<tool_call>Sure\n", "<tool_call>", True) is None


def test_no_closing_marker_waits_while_only_whitespace_follows() -> None:
    """Llama's next `;` call, or Mistral's next `[TOOL_CALLS]`, may still come."""
    llama = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert LlamaJson().end(llama + "  \n", "{", False) is None
    assert LlamaJson().end(llama + " ;", "{", False) is None
    assert LlamaJson().end(llama + ' ; {"name"', "{", False) is None
    assert LlamaJson().end(llama + "  \n", "{", True) == len(llama)
    assert LlamaJson().end(llama + ' ; {"name"', "{", True) == len(llama)
    mistral = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
    assert Mistral().end(mistral + "\n", "[TOOL_CALLS]", False) is None
    assert Mistral().end(mistral + "\n", "[TOOL_CALLS]", True) == len(mistral)
    twice = mistral + '[TOOL_CALLS]get_time[ARGS]{"tz": "UTC"}'
    assert Mistral().end(twice, "[TOOL_CALLS]", False) == len(mistral)
    pythonic = '[get_weather(city="Paris")]'
    assert Pythonic().end(pythonic + " ", "[", False) is None
    assert Pythonic().end(pythonic + " ", "[", True) == len(pythonic)
    wrapped = "<|python_start|>" + pythonic
    assert Pythonic().end(wrapped + "<|python_e", "<|python_start|>", False) is None
    assert Pythonic().end(wrapped, "<|python_start|>", True) == len(wrapped)
    assert Pythonic().calls(wrapped, "<|python_start|>") == [ParsedCall("get_weather", PARIS)]


MALFORMED = [
    (
        Hermes(),
        "<tool_call>",
        '<tool_call>{"name": "get_weather", "arguments": {"a": 1}</tool_call>',
    ),
    (Hermes(), "<tool_call>", '<tool_call>{"name": "get_weather", "arguments": "{}"}</tool_call>'),
    (Hermes(), "<tool_call>", '<tool_call>{"name": "get weather", "arguments": {}}</tool_call>'),
    (Hermes(), "<tool_call>", '<tool_call>{"name": "f", "arguments": {}} and more</tool_call>'),
    (
        Qwen3Coder(),
        "<tool_call>",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
    ),
    (
        Qwen3Coder(),
        "<tool_call>",
        "<tool_call>\n<function=f>\n<parameter=a>1</parameter>\n"
        "<parameter=a>2</parameter>\n</function>\n</tool_call>",
    ),
    (Qwen3Coder(), "<tool_call>", "<tool_call>\n<function=f>\nprose\n</function>\n</tool_call>"),
    (Glm(), "<tool_call>", "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call>"),
    (Glm(), "<tool_call>", "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1\n</tool_call>"),
    (Glm(), "<tool_call>", "<tool_call>f\nprose<arg_key>a</arg_key></tool_call>"),
    (
        KimiK2(),
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
        '<|tool_call_argument_begin|>{"a": }<|tool_call_end|><|tool_calls_section_end|>',
    ),
    (
        KimiK2(),
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f"
        '<|tool_call_argument_begin|>{"a": 1}<|tool_call_end|><|tool_calls_section_end|>',
    ),
    (DeepSeek(), DS_CALLS, f"{DS_CALLS}{DS_CALL}f{DS_SEP}{{'a': 1}}{DS_CALL_END}{DS_CALLS_END}"),
    (
        DeepSeek(),
        DS_CALLS,
        f'{DS_CALLS}{DS_CALL}function{DS_SEP}f\n{{"a": 1}}{DS_CALL_END}{DS_CALLS_END}',
    ),
    (
        DeepSeekDsml(),
        f"<{DSML}function_calls>",
        f'<{DSML}function_calls><{DSML}invoke name="f"><{DSML}parameter name="a" '
        f'string="false">two</{DSML}parameter></{DSML}invoke></{DSML}function_calls>',
    ),
    (
        DeepSeekDsml(),
        f"<{DSML}function_calls>",
        f'<{DSML}function_calls><{DSML}invoke name="f"><{DSML}parameter name="a">'
        f"2</{DSML}parameter></{DSML}invoke></{DSML}function_calls>",
    ),
    (Mistral(), "[TOOL_CALLS]", '[TOOL_CALLS][{"name": "f", "arguments": "a"}]'),
    (Mistral(), "[TOOL_CALLS]", '[TOOL_CALLS][{"name": "f", "arguments": {}, "x": 1}]'),
    (Mistral(), "[TOOL_CALLS]", '[TOOL_CALLS]f[ARGS]{"a": 1,}'),
    (LlamaJson(), "{", '{"name": "f", "parameters": {}, "arguments": {}}'),
    (LlamaFunction(), "<function=", '<function=f>{"a": 1,}</function>'),
    (LlamaFunction(), "<function=", '<function=f>{"a": 1} more</function>'),
    (LlamaJson(), "{", '{"type": "object", "name": "f", "parameters": {}}'),
    (LlamaJson(), "{", '{"name": "f", "parameters": {}}; plus'),
    (Pythonic(), "[", "[get_weather(city=Paris)]"),
    (Pythonic(), "[", '[get_weather("Paris")]'),
    (Pythonic(), "[", "[f(x=1 + 2)]"),
    (Pythonic(), "[", "[f(x=(1, 2))]"),
    (Pythonic(), "[", "[f(**kwargs)]"),
    (Pythonic(), "[", "[f(x=float('nan'))]"),
    (Pythonic(), "[", "[os.system(cmd='ls')]"),
    (Harmony(), "<|channel|>", "<|channel|>commentary to=functions.f json<|message|>{a}<|call|>"),
    (
        Harmony(),
        "<|channel|>",
        '<|channel|>commentary to=functions.f <|constrain|>text<|message|>{"a": 1}<|call|>',
    ),
    (
        MiniMaxM2(),
        "<minimax:tool_call>",
        '<minimax:tool_call><invoke name="f"><parameter name="a">1</parameter></minimax:tool_call>',
    ),
]


@pytest.mark.parametrize(("family", "opener", "span"), MALFORMED)
def test_malformed_spans_do_not_parse(family: MarkupFamily, opener: str, span: str) -> None:
    assert family.calls(span, opener) is None


NEAR_MISSES = [
    # (family, opener, the text up to the first character it cannot be, the rest)
    (Hermes(), "<tool_call>", "<tool_call> t", "ag is used for tool calls"),
    (Hermes(), "<tool_call>", '<tool_call>{"a', 'nswer": 1}'),
    (Hermes(), "<tool_call>", "<tool_call>\n<", "function=get_weather>\n"),
    (Hermes(), "<tool_call>", "<tool_call>g", "et_weather\n<arg_key>"),
    (Qwen3Coder(), "<tool_call>", "<tool_call> t", "ag is used for tool calls"),
    (Qwen3Coder(), "<tool_call>", "<tool_call>\n{", '"name": "get_weather"'),
    (Qwen3Coder(), "<tool_call>", "<tool_call>g", "et_weather\n<arg_key>"),
    (Qwen3Coder(), "<function=", "<function=foo> i", "s how it starts"),
    (Qwen3Coder(), "<function=", "<function=get_weather>{", '"city": "Paris"}</function>'),
    (Qwen3Coder(), "<tool_call>", "<tool_call><function=f>{", '"a": 1}</function></tool_call>'),
    (LlamaFunction(), "<function=", "<function=foo> i", "s how it starts"),
    (LlamaFunction(), "<function=", "<function=f>\n<", "parameter=a>\n1\n</parameter>"),
    (LlamaFunction(), "<function=", "<function=a ", "b> {}"),
    (Glm(), "<tool_call>", "<tool_call> tag ", "is used for tool calls"),
    (Glm(), "<tool_call>", "<tool_call>\n{", '"name": "get_weather"'),
    (Glm(), "<tool_call>", "<tool_call>\n<", "function=get_weather>\n"),
    (Glm(), "<tool_call>", "<tool_call>Sure\nh", "ere it is"),
    (KimiK2(), "<|tool_calls_section_begin|>", "<|tool_calls_section_begin|> o", "pens a section"),
    (DeepSeek(), DS_CALLS, f"{DS_CALLS} m", "arks the calls"),
    (DeepSeek(), DS_CALLS, f"{DS_CALLS}{DS_CALL}get ", "weather"),
    (DeepSeekDsml(), f"<{DSML}function_calls>", f"<{DSML}function_calls> i", "s the block"),
    (Mistral(), "[TOOL_CALLS]", "[TOOL_CALLS] are ", "how Mistral marks calls"),
    (Mistral(), "[TOOL_CALLS]", "[TOOL_CALLS][1", ", 2]"),
    (Mistral(), "[TOOL_CALLS]", "[TOOL_CALLS]token[1", "]"),
    (LlamaJson(), "{", '{"a', 'nswer": 42}'),
    (LlamaJson(), "{", '{"type": "o', 'bject", "properties": {}}'),
    (LlamaJson(), "<|python_tag|>", "<|python_tag|>i", "mport math"),
    (Pythonic(), "[", "[TOOL_CALLS]", "get_weather"),
    (Pythonic(), "[", "[link]", "(http://example.com)"),
    (Pythonic(), "[", "[1", ", 2]"),
    (Pythonic(), "[", "[x]", " done"),
    (Pythonic(), "[", "[]", ""),
    (Pythonic(), "<|python_start|>", "<|python_start|>p", "rint('hi')"),
    (Harmony(), "<|channel|>", "<|channel|>analysis<", "|message|>Let me think."),
    (Harmony(), "<|channel|>", "<|channel|>commentary<", "|message|>Checking the weather."),
    (Harmony(), "<|channel|>", "<|channel|>commentary to=b", "rowser.search json<|message|>"),
    (Harmony(), "<|start|>", "<|start|>assistant<|channel|>final<", "|message|>Hello"),
    (Harmony(), "<|start|>", "<|start|>u", "ser<|message|>Hello"),
    (MiniMaxM2(), "<minimax:tool_call>", "<minimax:tool_call> i", "s how MiniMax calls tools"),
]


@pytest.mark.parametrize(("family", "opener", "decisive", "rest"), NEAR_MISSES)
def test_near_misses_are_refused_at_once(
    family: MarkupFamily, opener: str, decisive: str, rest: str
) -> None:
    """Text that only mentions a marker is refused at the first character that rules the
    family out (so the recogniser releases it), and never named later."""
    text = decisive + rest
    verdicts = {n: family.name(text[:n], opener) for n in range(len(opener), len(text) + 1)}
    assert all(verdicts[n] is None for n in range(len(opener), len(decisive)))
    assert all(verdicts[n] is REFUSED for n in range(len(decisive), len(text) + 1))


def test_families_and_openers() -> None:
    pairs = [(f.family, opener) for f in FAMILIES for opener in f.openers]
    assert all(f.family and f.openers for f in FAMILIES)
    assert all(opener for _, opener in pairs)
    assert len(pairs) == len(set(pairs))
    assert len({f.family for f in FAMILIES}) == len(FAMILIES)
    assert [f.family for f in FAMILIES if f.at_start_only] == ["llama_json", "pythonic"]
    assert [f.family for f in FAMILIES] == [
        "hermes",
        "qwen3_coder",
        "glm",
        "kimi_k2",
        "deepseek",
        "deepseek_dsml",
        "mistral",
        "llama_json",
        "llama_function",
        "pythonic",
        "harmony",
        "minimax_m2",
    ]


FRAGMENTS = sorted(
    {
        piece
        for case in CASES
        for piece in (
            case.opener,
            *getattr(case.family, "closers", ()),
            *(case.span[i : i + 7] for i in range(0, len(case.span), 5)),
        )
    }
    | {"{", "}", "[", "]", "(", ")", '"', "'", "\\", ";", " ", "\n", "<", ">", "=", ":", ","}
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(CASES),
    cut=st.integers(min_value=0),
    noise=st.lists(st.sampled_from(FRAGMENTS), max_size=12),
)
def test_any_text_gets_an_answer(case: Case, cut: int, noise: list[str]) -> None:
    """A real span cut anywhere and followed by markup fragments: the hooks never raise, their
    answers stay in range, and a name or a refusal, once given, holds as the text grows."""
    head = case.span[: len(case.opener) + cut % (len(case.span) - len(case.opener) + 1)]
    text = head + "".join(noise)
    verdict: object = None
    for length in range(len(case.opener), len(text) + 1):
        prefix = text[:length]
        named = case.family.name(prefix, case.opener)
        assert named is None or named is REFUSED or isinstance(named, str)
        if verdict is not None:
            assert named == verdict or named is verdict, prefix
        verdict = named
        for final in (False, True):
            end = case.family.end(prefix, case.opener, final)
            assert end is None or len(case.opener) <= end <= length
            if end is not None:
                parsed = case.family.calls(prefix[:end], case.opener)
                assert parsed is None or all(isinstance(c, ParsedCall) for c in parsed)
