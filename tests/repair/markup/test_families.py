"""Each family's markup, as its chat template or its serving layer's parser writes it: the name
on every prefix, the end on every prefix, the parsed calls, and the near-misses it must refuse.

The cases sit by the shape of their markup, as the families do (test_families_tags.py,
test_families_tokens.py, test_families_bare.py); the tests here run every family's."""

from __future__ import annotations

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
from tests.repair.markup.family_cases import (
    DS_CALL,
    DS_CALL_END,
    DS_CALLS,
    DS_CALLS_END,
    DS_SEP,
    DSML,
    Case,
)
from tests.repair.markup.test_families_bare import CASES as BARE_CASES
from tests.repair.markup.test_families_tags import CASES as TAG_CASES
from tests.repair.markup.test_families_tokens import CASES as TOKEN_CASES

ORDER = [f.family for f in FAMILIES]
CASES = sorted([*TAG_CASES, *TOKEN_CASES, *BARE_CASES], key=lambda c: ORDER.index(c.family.family))
"""Every family's cases, in the order of FAMILIES (and of the cases within a family)."""


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
    and getattr(c.family, "closer_optional", True)
    and not c.id.startswith("qwen3_coder_bare")
]
CLOSER_REQUIRED = [c for c in CASES if not getattr(c.family, "closer_optional", True)]


@pytest.mark.parametrize("case", CLOSER_REQUIRED, ids=lambda c: c.id)
def test_no_end_without_a_closing_marker_the_servers_require(case: Case) -> None:
    """GLM, MiniMax-M2 and DSML: their servers read calls only up to the closing marker, so a
    span the model left open at a normal finish has no end (the recogniser sends it as text)."""
    closer = next(c for c in case.family.closers if c in case.span)  # type: ignore[attr-defined]
    cut = case.span[: case.span.rindex(closer)]
    assert case.family.end(cut, case.opener, False) is None
    assert case.family.end(cut, case.opener, True) is None


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
    # `"arguments"` may come before `"name"`: `{"a` may still be a call, `{"an` not.
    (Hermes(), "<tool_call>", '<tool_call>{"an', 'swer": 1}'),
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
    # Kimi's servers drop what comes before the first call: only the section's end refuses.
    (
        KimiK2(),
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_begin|> opens a section<|tool_calls_section_end|>",
        " here",
    ),
    (DeepSeek(), DS_CALLS, f"{DS_CALLS} m", "arks the calls"),
    (DeepSeek(), DS_CALLS, f"{DS_CALLS}{DS_CALL}get ", "weather"),
    (DeepSeekDsml(), f"<{DSML}function_calls>", f"<{DSML}function_calls> i", "s the block"),
    (Mistral(), "[TOOL_CALLS]", "[TOOL_CALLS] are ", "how Mistral marks calls"),
    (Mistral(), "[TOOL_CALLS]", "[TOOL_CALLS][1", ", 2]"),
    (Mistral(), "[TOOL_CALLS]", "[TOOL_CALLS]token[1", "]"),
    (LlamaJson(), "{", '{"an', 'swer": 42}'),
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
