"""The recogniser's streaming and safety rules, on Hermes markup (each family's own forms are
pinned in test_families.py and streamed in test_family_streams.py)."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from proxy.repair.calls.declared import DeclaredTools
from proxy.repair.markup.families import FAMILIES
from proxy.repair.markup.recogniser import NAME_WITHIN, CallRecogniser

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
REQUEST = {"messages": [], "tools": [WEATHER]}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def uncounted(kind: str, amount: int) -> None:
    """A `count` for tests that read no counts."""


def recognise(pieces, request=REQUEST, truncated=False, max_span=100_000):
    counts: Counter[str] = Counter()
    tools = DeclaredTools.of(request)
    assert tools is not None
    recogniser = CallRecogniser(FAMILIES, tools, lambda k, n: counts.update({k: n}), max_span)
    texts, calls = [], []
    for piece in pieces:
        text, found = recogniser.feed(piece)
        texts.append(text)
        calls.extend(found)
    text, found = recogniser.finish(truncated)
    texts.append(text)
    calls.extend(found)
    return texts, calls, counts


def cuts(text):
    """`text` in two and three pieces, cut at every boundary (the middle piece 1..9 long)."""
    for first in range(len(text) + 1):
        yield [text[:first], text[first:]]
        for width in (1, 2, 5, 9):
            if first + width < len(text):
                yield [text[:first], text[first : first + width], text[first + width :]]


def test_a_call_between_text_is_recognised_at_every_split() -> None:
    answer = f"Let me check.\n\n{CALL}\nDone."
    for pieces in cuts(answer):
        texts, calls, counts = recognise(pieces)
        assert "".join(texts) == "Let me check.\n\nDone.", pieces
        assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city":"Paris"}')]
        assert counts == {"text_tool_call": 1}


def test_two_calls_in_a_row_leave_no_whitespace_between_them() -> None:
    other = CALL.replace("Paris", "Tokyo")
    texts, calls, _ = recognise([CALL, "\n", other, "\n"])
    assert "".join(texts) == ""
    assert [c.arguments for c in calls] == ['{"city":"Paris"}', '{"city":"Tokyo"}']


def test_plain_text_streams_through_untouched_and_unheld() -> None:
    recogniser = CallRecogniser(FAMILIES, DeclaredTools.of(REQUEST), uncounted, 1000)
    pieces = ["Hello", ", world", "! 1 < 2 and a [link]", "(x) and `code`", " end."]
    for piece in pieces:
        text, calls = recogniser.feed(piece)
        assert text == piece and calls == []
    assert recogniser.finish(False) == ("", [])


def test_only_a_partial_opener_is_held() -> None:
    recogniser = CallRecogniser(FAMILIES, DeclaredTools.of(REQUEST), uncounted, 1000)
    assert recogniser.feed("Hi ") == ("Hi ", [])
    assert recogniser.feed("there <tool_") == ("there ", [])
    assert recogniser.feed("box> here") == ("<tool_box> here", [])


def test_a_mentioned_tag_is_released_within_the_name_bound() -> None:
    recogniser = CallRecogniser(FAMILIES, DeclaredTools.of(REQUEST), uncounted, 10**6)
    assert recogniser.feed("write <tool_call>") == ("write ", [])
    assert recogniser.feed(" then") == ("", [])  # GLM's `<tool_call>NAME\n<arg_key>` still may
    assert recogniser.feed(" I") == ("<tool_call> then I", [])  # no family's: released
    recogniser.feed("<tool_call>{")
    text, _ = recogniser.feed("x" * NAME_WITHIN)
    assert text.startswith("<tool_call>{x")  # no name within the bound: text


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "text_tool_call_undeclared"),
        (
            '<tool_call>{"name": "get_weather", "arguments": {"town": "P"}}</tool_call>',
            "text_tool_call_invalid_arguments",
        ),
        (
            '<tool_call>{"name": "get_weather", "arguments": {"city": "P", "days": "x"}}'
            "</tool_call>",
            "text_tool_call_invalid_arguments",
        ),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": }</tool_call>', None),
        (f"```xml\n{CALL}\n```", "text_tool_call_in_code"),
        (f"Example:\n```\n{CALL}\n```\nthat is all", "text_tool_call_in_code"),
        (
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Par',
            "text_tool_call_unclosed",
        ),
    ],
)
def test_what_is_refused_stays_text_exactly_and_is_counted(answer: str, kind: str | None) -> None:
    for pieces in cuts(answer):
        texts, calls, counts = recognise(pieces)
        assert "".join(texts) == answer and calls == []
        if kind:
            assert counts[kind] == 1, (pieces, counts)
        assert counts["text_tool_call"] == 0


def test_unparseable_json_after_a_declared_name_is_counted() -> None:
    answer = '<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>'
    texts, calls, counts = recognise([answer])
    assert "".join(texts) == answer and not calls
    assert counts["text_tool_call_unparsed"] == 1


def test_a_call_cut_off_by_length_is_text_never_a_call() -> None:
    cut = CALL[:-20]
    texts, calls, counts = recognise([cut], truncated=True)
    assert "".join(texts) == cut and calls == []
    assert counts == {"text_tool_call_truncated": 1}


def test_a_complete_call_before_the_cut_is_still_delivered() -> None:
    texts, calls, counts = recognise([CALL, CALL[:30]], truncated=True)
    assert len(calls) == 1 and "".join(texts) == CALL[:30]
    assert counts == {"text_tool_call": 1, "text_tool_call_truncated": 1}


def test_a_span_past_its_bound_goes_out_as_text() -> None:
    answer = '<tool_call>{"name": "get_weather", "arguments": {"city": "' + "x" * 500
    texts, calls, counts = recognise([answer[:100], answer[100:]], max_span=200)
    assert "".join(texts) == answer and not calls
    assert counts["text_tool_call_too_long"] == 1


def test_tool_choice_none_and_no_tools_declare_nothing() -> None:
    assert DeclaredTools.of({"tools": [WEATHER], "tool_choice": "none"}) is None
    assert DeclaredTools.of({"messages": []}) is None


def test_a_named_tool_choice_declares_only_that_tool() -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
    forced = {"type": "function", "function": {"name": "get_time"}}
    tools = DeclaredTools.of({"tools": [WEATHER, other], "tool_choice": forced})
    assert tools is not None and "get_time" in tools and "get_weather" not in tools
    _, calls, counts = recognise([CALL], request={"tools": [WEATHER, other], "tool_choice": forced})
    assert calls == [] and counts["text_tool_call_undeclared"] == 1


def test_a_second_block_after_text_is_recognised_too() -> None:
    texts, calls, _ = recognise([f"a {CALL} b <tool_call>no</tool_call> c {CALL}"])
    assert len(calls) == 2
    assert "".join(texts) == "a b <tool_call>no</tool_call> c "


# ── a hostile upstream costs its own exchange linear work ─────────────────────


def test_a_huge_span_in_tiny_pieces_is_asked_for_its_end_rarely() -> None:
    from proxy.repair.markup import families

    asked = []

    class Counting(families.Hermes):
        def end(self, span: str, opener: str, final: bool) -> int | None:
            asked.append(len(span))
            return super().end(span, opener, final)

    tools = DeclaredTools.of(REQUEST)
    recogniser = CallRecogniser([Counting()], tools, uncounted, 10**7)
    recogniser.feed('<tool_call>{"name": "get_weather", "arguments": {"city": "')
    for _ in range(200_000):
        recogniser.feed("x")
    recogniser.feed('"}}</tool_call>')
    _, calls = recogniser.finish(False)
    assert len(calls) == 1 and len(orjson.loads(calls[0].arguments)["city"]) == 200_000
    assert len(asked) < 200  # one look per eighth of growth, not one per piece
    assert sum(asked) < 20 * 200_000


def test_text_full_of_fences_and_partial_openers_passes_whole() -> None:
    text = "```" * 20_000 + "<tool" * 2_000 + "[" * 10_000
    texts, calls, _ = recognise([text[i : i + 997] for i in range(0, len(text), 997)])
    assert "".join(texts) == text and calls == []


def test_whitespace_after_a_call_is_dropped_without_holding_more_than_its_bound() -> None:
    recogniser = CallRecogniser(FAMILIES, DeclaredTools.of(REQUEST), uncounted, 1000)
    recogniser.feed(CALL)
    assert recogniser.feed("\n" * 10) == ("", [])
    assert recogniser.feed("\n" * 300) == ("", [])  # past the bound: dropped, not held
    assert recogniser.feed("Done.") == ("Done.", [])  # nothing held in front of it
