"""The tag families' markup (proxy/repair/markup/families/tags.py and invokes.py), as their chat
templates or their serving layers' parsers write it, and what only these families do: every case
runs through the tests in test_families.py."""

from __future__ import annotations

from proxy.repair.markup.families import (
    DeepSeekDsml,
    Glm,
    Hermes,
    LlamaFunction,
    MiniMaxM2,
    Qwen3Coder,
)
from proxy.repair.markup.spans import ParsedCall
from tests.repair.markup.family_cases import DSML, PARIS, Case

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
            ParsedCall("get_weather", {"city": "Paris", "days": 3, "hours": [6, 18]}, unwrap=True),
            ParsedCall("get_time", {"tz": "UTC"}, unwrap=True),
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
        [ParsedCall("get_weather", PARIS, unwrap=True)],
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
