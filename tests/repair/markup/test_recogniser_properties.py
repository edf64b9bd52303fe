"""Adversarial properties of the recogniser (proxy/repair/markup/recogniser.py) and of the
declared tools it checks calls against (proxy/repair/calls/declared.py): split invariance,
nothing lost or invented, plain text not delayed, safety, bounded work, and never raising on
what a hostile upstream or an odd request schema can send."""

from __future__ import annotations

import itertools
import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.repair.calls.declared import DeclaredTools
from proxy.repair.markup.families import FAMILIES
from proxy.repair.markup.recogniser import NAME_WITHIN, CallRecogniser
from tests.repair.markup.test_family_streams import REQUEST as FAMILY_REQUEST
from tests.repair.markup.test_family_streams import SAMPLES, START_ONLY
from tests.repair.markup.test_recogniser import CALL, REQUEST, recognise


def function(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def request_for(parameters: dict, name: str = "get_weather") -> dict:
    return {"messages": [], "tools": [function(name, parameters)]}


OPEN = request_for({"type": "object"})
"""A tool whose schema takes any object: only the recogniser's own limits refuse a call."""


def hermes(arguments: str, name: str = "get_weather") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def glm(name: str, key: str, value: str) -> str:
    return (
        f"<tool_call>{name}\n<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n</tool_call>"
    )


# ── never raising: what cannot be delivered faithfully stays text ─────────────────────────


@pytest.mark.parametrize(
    ("answer", "request_"),
    [
        # A Python string escape for a lone surrogate, which no JSON text can carry.
        ('[get_weather(city="\\ud800")]', OPEN),
        # A bare value typed integer by the schema, past what int() reads or orjson writes.
        (glm("f", "i", "9" * 5000), request_for({"properties": {"i": {"type": "integer"}}}, "f")),
        # A schema whose $ref points nowhere, or off the machine: refused, never fetched.
        (CALL, request_for({"properties": {"city": {"$ref": "#/$defs/nope"}}})),
        (CALL, request_for({"properties": {"city": {"$ref": "http://127.0.0.1:9/x.json"}}})),
        # An integer too large for the float jsonschema's multipleOf divides it as.
        (
            "[get_weather(n=1" + "0" * 400 + ")]",
            request_for({"properties": {"n": {"multipleOf": 0.5}}}),
        ),
        # A recursive schema checked against arguments nested as deep as orjson reads.
        (
            hermes('{"x": ' + "[" * 1000 + "]" * 1000 + "}"),
            request_for(
                {
                    "properties": {"x": {"$ref": "#/$defs/n"}},
                    "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                }
            ),
        ),
    ],
)
def test_what_cannot_be_delivered_faithfully_stays_text_and_never_raises(
    answer: str, request_: dict
) -> None:
    texts, calls, counts = recognise([answer], request=request_)
    assert calls == [] and "".join(texts) == answer
    assert counts["text_tool_call"] == 0 and sum(counts.values()) >= 1


DEEP = "[" * 300 + "]" * 300
BIG = 123456789012345678901234567890


@pytest.mark.parametrize(
    ("answer", "request_", "arguments"),
    [
        # Nearly as deep as a document may nest (json_codec.MAX_DEPTH, 254: as deep as orjson
        # writes), with the call around them.
        (
            hermes('{"x": ' + "[" * 250 + "]" * 250 + "}"),
            OPEN,
            '{"x":' + "[" * 250 + "]" * 250 + "}",
        ),
        # Integers past 64 bits, from JSON, Python literals and a bare value the schema types.
        (
            hermes('{"n": 123456789012345678901234567890}'),
            OPEN,
            '{"n":123456789012345678901234567890}',
        ),
        (
            "[get_weather(n=123456789012345678901234567890)]",
            OPEN,
            '{"n":123456789012345678901234567890}',
        ),
        (
            glm("f", "i", "9" * 30),
            request_for({"properties": {"i": {"type": "integer"}}}, "f"),
            '{"i":' + "9" * 30 + "}",
        ),
    ],
)
def test_long_integers_and_deep_nesting_are_delivered_exactly(
    answer: str, request_: dict, arguments: str
) -> None:
    texts, calls, _ = recognise([answer], request=request_)
    assert [call.arguments for call in calls] == [arguments] and "".join(texts) == ""


NUMBERS = request_for(
    {"properties": {"n": {"type": "number"}, "i": {"type": "integer"}}, "required": []}, "f"
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("9007199254740993", 9007199254740993),  # 2**53 + 1: a float would round it
        ("-9007199254740993", -9007199254740993),
        ("2.5", 2.5),
        ("7", 7),
    ],
)
def test_a_bare_number_keeps_its_exact_value(value: str, expected: float) -> None:
    _, calls, _ = recognise([glm("f", "n", value)], request=NUMBERS)
    assert [orjson.loads(call.arguments) for call in calls] == [{"n": expected}]


@pytest.mark.parametrize("value", ["1e999", "-1e999"])
def test_a_bare_number_past_a_double_is_not_turned_into_null(value: str) -> None:
    answer = glm("f", "n", value)
    texts, calls, _ = recognise([answer], request=NUMBERS)
    assert calls == [] and "".join(texts) == answer


def test_typed_leaves_what_does_not_read_as_its_type_a_string() -> None:
    tools = DeclaredTools.of(NUMBERS)
    assert tools is not None
    assert tools.typed("f", {"i": "9" * 5000, "n": "1e999"}) == {"i": "9" * 5000, "n": "1e999"}


# ── split invariance ──────────────────────────────────────────────────────────────────────

TOKENS = [
    CALL,
    hermes('{"city": "Tokyo"}'),
    hermes('{"town": "Nowhere"}'),  # invalid arguments: stays text
    hermes('{"city": "Rome"}', name="rm_rf"),  # undeclared: stays text
    "```",
    "`",
    "``",
    "Let me check. ",
    "\n",
    "\r\n",
    " ",
    "<tool_",
    "<tool_call>",
    "</tool_call>",
    "[",
    "]",
    "{",
    "}",
    "<",
    "<|",
    "[TOOL_CALLS]",
    '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}',
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Lima"}<|call|>',
    "<function=get_weather>",
    "\u00e9t\u00e9 \U0001f600",
]


def pieces_of(text: str, cuts_at: list[int]) -> list[str]:
    points = sorted({0, len(text), *(min(c, len(text)) for c in cuts_at)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


def outcome(pieces: list[str], truncated: bool = False) -> tuple[str, list[tuple[str, str]]]:
    texts, calls, _ = recognise(pieces, truncated=truncated)
    return "".join(texts), [(call.name, call.arguments) for call in calls]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(TOKENS), max_size=12),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=15),
)
def test_any_split_gives_the_same_text_and_calls(tokens: list[str], cuts_at: list[int]) -> None:
    answer = "".join(tokens)
    assert outcome(pieces_of(answer, cuts_at)) == outcome([answer])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["`", "``", "```", "x", " ", "\n"]), max_size=12))
def test_a_run_of_backticks_split_anywhere_opens_and_closes_fences_alike(ticks: list[str]) -> None:
    """Backticks split between pieces count as the same fences as in one piece: the call
    after them is code (or not) alike."""
    answer = "".join(ticks) + CALL
    one = outcome([answer])
    assert outcome([*ticks, CALL]) == one
    assert outcome(list(answer)) == one


def test_backticks_before_a_call_do_not_reach_past_it() -> None:
    """Two backticks before a call and one after it are no fence (in one piece or split); the
    call right after a backtick is inline code, the one after the text is a call."""
    answer = "``" + CALL + "`x " + CALL
    assert outcome(["``", answer[2:]]) == outcome([answer]) == ("``" + CALL + "`x ", [PARIS])


PARIS = ("get_weather", '{"city":"Paris"}')


# ── a length cut: the cut span is text, a span closed before it is not ────────────────────


def test_a_large_call_closed_before_a_length_cut_is_delivered_however_it_is_split() -> None:
    """A span past SMALL_SPAN is looked at only as it grows by an eighth, so its closing tag
    may arrive unseen; a length cut after it must not turn the whole call into text."""
    answer = hermes('{"city": "' + "x" * 6000 + '"}') + " and then"
    expected = outcome([answer], truncated=True)
    assert expected[1] and expected[0] == "and then"
    for cut in (100, 3000, len(answer) - 20, len(answer) - 9):
        assert outcome([answer[:cut], answer[cut:]], truncated=True) == expected, cut
    assert outcome([answer[:100], answer[100:-12], answer[-12:]], truncated=True) == expected


def test_a_large_call_cut_by_length_is_still_text() -> None:
    answer = hermes('{"city": "' + "x" * 6000 + '"}')[:-3]
    assert outcome([answer[:100], answer[100:]], truncated=True) == (answer, [])


# ── text after a call is not held ─────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "markup",
    [
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        '[get_weather(city="Paris")]',
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    ],
)
def test_text_after_a_call_without_closing_marker_goes_out_when_it_arrives(markup: str) -> None:
    """These families' calls end where their brackets balance and text follows: the text that
    follows ends the span, in whatever piece (and with whatever characters) it arrives."""
    recogniser = CallRecogniser(FAMILIES, DeclaredTools.of(REQUEST), lambda k, n: None, 10**6)
    assert recogniser.feed(markup[:-3]) == ("", [])
    assert recogniser.feed(markup[-3:]) == ("", [])
    assert recogniser.feed("\n") == ("", [])
    text, calls = recogniser.feed("Then I will tell you")
    assert text == "Then I will tell you" and [c.name for c in calls] == ["get_weather"]
    assert recogniser.feed(" more words") == (" more words", [])


# ── bounded work: count what the families are asked, never time it ───────────────────────


def counting(family_class: type, asked: list[int]) -> object:
    class Counting(family_class):
        def name(self, span: str, opener: str):  # type: ignore[no-untyped-def]
            asked.append(len(span))
            return super().name(span, opener)

        def end(self, span: str, opener: str, final: bool):  # type: ignore[no-untyped-def]
            asked.append(len(span))
            return super().end(span, opener, final)

        def calls(self, span: str, opener: str):  # type: ignore[no-untyped-def]
            asked.append(len(span))
            return super().calls(span, opener)

    return Counting()


@pytest.mark.parametrize(
    ("family_name", "opener"),
    [
        ("Hermes", "<tool_call>"),
        ("Harmony", "<|channel|>"),
        ("Mistral", "[TOOL_CALLS]"),
        ("LlamaFunction", "<function="),
    ],
)
def test_many_openers_in_one_piece_cost_linear_work(family_name: str, opener: str) -> None:
    """A non-streamed answer (one piece) of 20,000 openers in a row: each opener is refused at
    once, and the text the family is shown per opener must not be the whole rest of the answer
    (that is quadratic: a megabyte of openers took minutes)."""
    from proxy.repair.markup import families

    asked: list[int] = []
    family = counting(getattr(families, family_name), asked)
    answer = opener * 20_000
    recogniser = CallRecogniser([family], DeclaredTools.of(REQUEST), lambda k, n: None, 10**6)
    text, calls = recogniser.feed(answer)
    rest, more = recogniser.finish(False)
    assert text + rest == answer and calls == more == []
    assert sum(asked) < 200 * len(answer)


def counting_families(asked: list[int]) -> list:
    """Every family, each hook call counted by the length of text it was shown."""
    return [counting(type(family), asked) for family in FAMILIES]


HOSTILE = {
    "angles": "<" * 1_000_000,
    "brackets": "[" * 1_000_000,
    "backticks": "`" * 1_000_000,
    "prefixes": "".join(opener[:-1] for opener in sorted({o for f in FAMILIES for o in f.openers}))
    * 3_000,
    "nested": '[TOOL_CALLS]get_weather[ARGS]{"city": ' + "[" * 200_000 + "]" * 200_000 + "}",
    "nested_list": "[TOOL_CALLS]" + "[" * 300_000,
    "deep_hermes": '<tool_call>{"name": "get_weather", "arguments": ' + "{" * 300_000,
    "pythonic_deep": "[get_weather(city=" + "[" * 300_000,
    "openers_mixed": "<tool_call><|channel|>[TOOL_CALLS]<function=<|start|>" * 10_000,
    "unclosed_strings": '<tool_call>{"name": "get_weather", "arguments": {"city": "'
    + '\\"' * 200_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("width", [None, 1, 4093])
def test_hostile_content_costs_linear_work_and_comes_out_whole(
    name: str, width: int | None
) -> None:
    answer = HOSTILE[name]
    if width == 1:
        answer = answer[:60_000]  # a byte at a time: enough to show the cost per piece
    pieces = (
        [answer] if width is None else [answer[i : i + width] for i in range(0, len(answer), width)]
    )
    asked: list[int] = []
    recogniser = CallRecogniser(
        counting_families(asked), DeclaredTools.of(REQUEST), lambda k, n: None, 100_000
    )
    texts, calls = [], []
    for piece in pieces:
        text, found = recogniser.feed(piece)
        texts.append(text)
        calls.extend(found)
    text, found = recogniser.finish(False)
    assert "".join(texts) + text == answer and calls == found == []
    assert len(asked) < 4 * len(answer) and sum(asked) < 300 * len(answer), (len(asked), sum(asked))


# ── nothing lost, nothing invented ────────────────────────────────────────────────────────

PLAIN = st.text(
    alphabet=st.sampled_from([*"abc xyz.,:;!?()}]>\n\r\t", "\u00e9", "\u4e1c", "\U0001f600"]),
    min_size=1,
    max_size=12,
)
"""Text with none of the openers' (or a fence's) first characters."""
ANYWHERE = sorted(set(SAMPLES) - START_ONLY)
"""Families whose markup is recognised anywhere in the content (not only at its start)."""


def family_outcome(pieces: list[str]) -> tuple[str, list[tuple[str, object]]]:
    texts, calls, _ = recognise(pieces, request=FAMILY_REQUEST)
    return "".join(texts), [(call.name, orjson.loads(call.arguments)) for call in calls]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(PLAIN, st.sampled_from(ANYWHERE)), max_size=8),
    st.lists(st.integers(min_value=0, max_value=3000), max_size=12),
)
def test_the_text_is_the_input_with_exactly_the_recognised_spans_removed(
    segments: list[str], cuts_at: list[int]
) -> None:
    """Text and calls of any family, in any order, split anywhere: the calls are the ones
    written, in order, and the text is the rest, only the whitespace right after a call gone."""
    answer, kept, expected_calls, after_call = [], [], [], False
    for segment in segments:
        if segment in SAMPLES:
            markup, written = SAMPLES[segment]
            answer.append(markup)
            expected_calls.extend(written)
            after_call = True
        else:
            answer.append(segment)
            text = segment.lstrip() if after_call else segment
            after_call = after_call and not text
            kept.append(text)
    whole = "".join(answer)
    assert family_outcome(pieces_of(whole, cuts_at)) == ("".join(kept), expected_calls)


@settings(max_examples=200, deadline=None)
@given(st.lists(PLAIN, max_size=10))
def test_plain_text_is_never_held_or_changed(pieces: list[str]) -> None:
    recogniser = CallRecogniser(FAMILIES, DeclaredTools.of(REQUEST), lambda k, n: None, 10**6)
    for piece in pieces:
        assert recogniser.feed(piece) == (piece, [])
    assert recogniser.finish(False) == ("", [])


OPENERS = sorted({opener for family in FAMILIES for opener in family.openers})
LONGEST = max(len(opener) for opener in OPENERS)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["a", " ", "x y", "\n"]),
            st.builds(
                lambda opener, cut: opener[: max(1, min(cut, len(opener) - 1))],
                st.sampled_from(OPENERS),
                st.integers(min_value=1, max_value=40),
            ),
        ),
        max_size=20,
    )
)
def test_a_held_tail_is_never_longer_than_the_longest_opener(pieces: list[str]) -> None:
    """Partial openers (never a whole one) after some text: all of it comes out, and at no
    point is more held back than an opener's length."""
    recogniser = CallRecogniser(FAMILIES, DeclaredTools.of(REQUEST), lambda k, n: None, 10**6)
    received = sent = len("Hi ")
    assert recogniser.feed("Hi ") == ("Hi ", [])
    out = ["Hi "]
    for piece in pieces:
        text, calls = recogniser.feed(piece)
        assert calls == []
        received, sent = received + len(piece), sent + len(text)
        out.append(text)
        assert received - sent < LONGEST
    out.append(recogniser.finish(False)[0])
    assert "".join(out) == "Hi " + "".join(pieces)


ARGUMENTS = st.dictionaries(
    st.sampled_from(["city", "days", "town", "x"]),
    st.one_of(
        st.text(max_size=8),
        st.integers(
            min_value=-(2**63), max_value=2**63 - 1
        ),  # past 64 bits: see test_open_questions
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
        st.none(),
        st.lists(st.integers(), max_size=3),
    ),
    max_size=3,
)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["get_weather", "get_time", "rm_rf", "get_weather2", "get-weather"]), ARGUMENTS
)
def test_a_call_is_only_made_of_a_declared_name_with_valid_arguments(
    name: str, arguments: dict
) -> None:
    written = json.dumps({"name": name, "arguments": arguments})
    answer = f"Checking. <tool_call>{written}</tool_call> done"
    texts, calls, _ = recognise([answer])
    tools = DeclaredTools.of(REQUEST)
    assert tools is not None
    if calls:
        [call] = calls
        delivered = orjson.loads(call.arguments)
        assert call.name == name and name in tools and tools.check(name, delivered) is None
        assert delivered == arguments  # the arguments written, not a changed value
        assert "".join(texts) == "Checking. done"
    else:
        assert "".join(texts) == answer
        assert name not in tools or tools.check(name, arguments) is not None


# ── bounded holding ───────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "opener",
    [
        "<tool_call>{",
        "<|tool_calls_section_begin|>",
        "[TOOL_CALLS]",
        "<minimax:tool_call>",
        "<|start|>assistant",
        "<function=",
        "<\uff5ctool\u2581calls\u2581begin\uff5c>",
    ],
)
def test_an_unnamed_span_is_released_within_the_name_bound(opener: str) -> None:
    """An opener followed by whitespace that never names a call, a byte at a time: never more
    than NAME_WITHIN characters held, and all of it comes out."""
    recogniser = CallRecogniser(FAMILIES, DeclaredTools.of(REQUEST), lambda k, n: None, 10**6)
    answer = "Hi " + opener + " " * 2000 + "end"
    received = sent = 0
    out = []
    for char in answer:
        text, calls = recogniser.feed(char)
        assert calls == []
        received, sent = received + 1, sent + len(text)
        out.append(text)
        assert received - sent <= NAME_WITHIN
    out.append(recogniser.finish(False)[0])
    assert "".join(out) == answer


def test_a_named_span_past_the_bound_is_released_a_byte_at_a_time() -> None:
    counts: list[str] = []
    recogniser = CallRecogniser(
        FAMILIES, DeclaredTools.of(REQUEST), lambda k, n: counts.append(k), 500
    )
    answer = '<tool_call>{"name": "get_weather", "arguments": {"city": "' + "x}" * 2000
    received = sent = 0
    for char in answer:
        text, calls = recogniser.feed(char)
        assert calls == []
        received, sent = received + 1, sent + len(text)
        assert received - sent <= 501
    assert sent == received and counts == ["text_tool_call_too_long"]


# ── safety ────────────────────────────────────────────────────────────────────────────────


# Samples of several spans (Hermes' and Qwen3.5's blocks) deliver the calls closed before a cut.
@pytest.mark.parametrize("name", sorted(set(SAMPLES) - {"hermes", "qwen35_parallel"}))
def test_a_span_cut_by_length_anywhere_is_never_a_call(name: str) -> None:
    """Every proper prefix of one span, ended by a length cut: the text exactly, no call."""
    markup = SAMPLES[name][0]
    for cut in range(1, len(markup)):
        texts, calls, _ = recognise([markup[:cut]], request=FAMILY_REQUEST, truncated=True)
        assert calls == [] and "".join(texts) == markup[:cut], (name, cut)


@pytest.mark.parametrize("name", ANYWHERE)
def test_markup_in_a_fence_is_text_at_every_split(name: str) -> None:
    answer = f"Example:\n```\n{SAMPLES[name][0]}\n```\nThat is all."
    for pieces in [[answer], list(answer), [answer[:14], answer[14:]]]:
        assert family_outcome(pieces) == (answer, [])


@pytest.mark.parametrize(
    "request_",
    [
        {**FAMILY_REQUEST, "tool_choice": "none"},
        {"messages": [], "tools": []},
        {**FAMILY_REQUEST, "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
    ],
)
def test_no_declared_tool_means_no_calls(request_: dict) -> None:
    tools = DeclaredTools.of(request_)
    assert tools is None or all(name not in tools for name in ("get_weather", "get_forecast"))


TIME = function("get_time", {"type": "object"})


def allowed(*names: str, mode: str = "auto") -> dict:
    tools = [{"type": "function", "function": {"name": name}} for name in names]
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}


@pytest.mark.parametrize(
    "choice",
    [
        allowed("get_time"),
        allowed("get_time", mode="required"),
        allowed(),
        {"type": "custom", "custom": {"name": "grammar_tool"}},
    ],
)
def test_a_tool_choice_that_leaves_a_tool_out_leaves_its_markup_text(choice: dict) -> None:
    """OpenAI's `allowed_tools` tool_choice narrows the tools a call may name as a named
    choice does, and forcing a custom tool leaves no function tool to call."""
    request_ = {"messages": [], "tools": [REQUEST["tools"][0], TIME], "tool_choice": choice}
    tools = DeclaredTools.of(request_)
    assert tools is None or "get_weather" not in tools
    if tools is not None:
        texts, calls, _ = recognise([CALL], request=request_)
        assert calls == [] and "".join(texts) == CALL


def test_allowed_tools_still_declares_the_tools_it_allows() -> None:
    request_ = {
        "messages": [],
        "tools": [REQUEST["tools"][0], TIME],
        "tool_choice": allowed("get_weather"),
    }
    _, calls, _ = recognise([CALL], request=request_)
    assert [call.name for call in calls] == ["get_weather"]


NEAR_MISSES = [
    *TOKENS,
    CALL[:-1],
    CALL[:25],
    CALL[11:],
    "<tool_call>{",
    '{"name": "get_weather"',
    "[get_weather(",
    "<|start|>assistant",
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0",
    "<\uff5ctool\u2581calls\u2581begin\uff5c>",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(NEAR_MISSES), max_size=10),
    st.lists(st.integers(min_value=0, max_value=1500), max_size=12),
    st.booleans(),
)
def test_when_no_call_is_recognised_the_text_is_exactly_the_input(
    tokens: list[str], cuts_at: list[int], truncated: bool
) -> None:
    answer = "".join(tokens)
    text, calls = outcome(pieces_of(answer, cuts_at), truncated=truncated)
    if not calls:
        assert text == answer
    else:
        assert len(text) < len(answer)


@pytest.mark.parametrize("dialect", [5, None, [], {}, True, 1.5, "not a uri"])
def test_a_schema_naming_an_odd_dialect_is_unusable_or_used_never_raising(dialect: object) -> None:
    """`$schema` comes from the request: any value jsonschema cannot build a validator from
    makes the tool's calls refused (text), never an exception in the stream."""
    request_ = request_for({"$schema": dialect, "type": "object"})
    texts, calls, counts = recognise([CALL], request=request_)
    if calls:
        assert [call.name for call in calls] == ["get_weather"]
    else:
        assert "".join(texts) == CALL and counts["text_tool_call_schema_unusable"] == 1


def test_arguments_nested_deeper_than_a_document_may_are_left_as_text() -> None:
    """Past json_codec.MAX_DEPTH the arguments are malformed JSON to the proxy (nothing could
    write them back whole): no call is made of them, and the text goes on as it came."""
    answer = hermes('{"x": ' + "[" * 300 + "]" * 300 + "}")
    texts, calls, _ = recognise([answer], request=OPEN)
    assert calls == []
    assert "".join(texts) == answer
