"""The families with no closing marker (proxy/repair/markup/families/bare.py), as their chat
templates write them, and what only these families do: every case runs through the tests in
test_families.py."""

from __future__ import annotations

from proxy.repair.markup.families import LlamaJson, Mistral, Pythonic
from proxy.repair.markup.spans import ParsedCall
from tests.repair.markup.family_cases import PARIS, Case

CASES = [
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
]


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
