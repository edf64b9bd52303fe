"""ReasoningSplitter (proxy/repair/markup/reasoning.py): one choice's content told apart into
reasoning and answer while it streams. Every case is checked whole and cut at every character
boundary into two and three pieces: the joined output must not depend on where the upstream's
deltas happened to break, and the splitter must never hold more than MAX_HELD."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pytest

from proxy.repair.markup.reasoning import MAX_HELD, ReasoningSplitter

COMMENTARY = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>'
)


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    reasoning: str
    content: str
    opened_by_template: bool = False
    unopened_close: bool = False


CASES = [
    Case(
        "think_block",
        "<think>The user wants Paris.</think>\n\nIt is sunny in Paris.",
        "The user wants Paris.",
        "It is sunny in Paris.",
    ),
    Case("leading_whitespace", " \n\n<think>\nr\n</think>\nanswer", "\nr\n", "answer"),
    Case("never_closed", "<think>still thinking when it ends", "still thinking when it ends", ""),
    Case(
        "later_think_is_text",
        "Use <think> to open and </think> to close: <think>x</think>.",
        "",
        "Use <think> to open and </think> to close: <think>x</think>.",
    ),
    Case(
        "second_block_after_the_answer_began_is_text",
        "<think>r</think>a <think>s</think> b</think>",
        "r",
        "a <think>s</think> b</think>",
    ),
    Case("tag_prefix_that_is_not_a_tag", "<thinking>no</thinking>", "", "<thinking>no</thinking>"),
    Case("only_a_tag_prefix", "<thi", "", "<thi"),
    Case("only_whitespace", "\n \n", "", "\n \n"),
    Case(
        "too_much_whitespace_before_the_tag",
        " " * 17 + "<think>x</think>y",
        "",
        " " * 17 + "<think>x</think>y",
    ),
    Case(
        "close_without_opener_is_text_and_noted",
        "The user greets me.\n</think>\n\nHello!",
        "",
        "The user greets me.\n</think>\n\nHello!",
        unopened_close=True,
    ),
    Case(
        "close_without_opener_at_the_start",
        "</think>Hello!",
        "",
        "</think>Hello!",
        unopened_close=True,
    ),
    Case(
        "opened_by_template",
        "The user greets me.\n</think>\n\nHello!",
        "The user greets me.\n",
        "Hello!",
        opened_by_template=True,
    ),
    Case(
        "opened_by_template_and_written_anyway",
        "\n<think>r</think>a",
        "r",
        "a",
        opened_by_template=True,
    ),
    Case(
        "opened_by_template_never_closed_stays_reasoning",
        "Hello! How can I help?",
        "Hello! How can I help?",
        "",
        opened_by_template=True,
    ),
    Case(
        "harmony_analysis_then_final",
        "<|channel|>analysis<|message|>User asks weather.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>",
        "User asks weather.",
        "It is sunny.",
    ),
    Case(
        "harmony_with_whitespace_and_a_start",
        "\n<|start|>assistant<|channel|>analysis<|message|>r<|end|>\n"
        "<|channel|>final<|message|>a<|end|>",
        "r",
        "a",
    ),
    Case(
        "harmony_final_only",
        "<|channel|>final<|message|>Just the answer.<|return|>",
        "",
        "Just the answer.",
    ),
    Case(
        "harmony_next_header_without_end",
        "<|channel|>analysis<|message|>r<|start|>assistant<|channel|>final<|message|>a",
        "r",
        "a",
    ),
    Case(
        "harmony_analysis_then_tool_call_passes_unchanged",
        "<|channel|>analysis<|message|>Need the weather tool.<|end|>" + COMMENTARY,
        "Need the weather tool.",
        COMMENTARY,
    ),
    Case("harmony_commentary_at_the_start_unchanged", COMMENTARY, "", COMMENTARY),
    Case(
        "harmony_recipient_in_the_role_unchanged",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json"
        '<|message|>{"city": "Paris"}<|call|>',
        "",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json"
        '<|message|>{"city": "Paris"}<|call|>',
    ),
    # Issue 27: after a call the messages are told apart again, as the servers' harmony parsers
    # do: the final channel's framing goes, its text is content; the call stays as it came.
    Case(
        "harmony_final_after_a_call_loses_its_framing",
        COMMENTARY + "<|start|>assistant<|channel|>final<|message|>On it.<|return|>",
        "",
        COMMENTARY + "On it.",
    ),
    Case(
        "harmony_two_calls_then_analysis",
        COMMENTARY + COMMENTARY + "<|channel|>analysis<|message|>Both sent.<|end|>",
        "Both sent.",
        COMMENTARY + COMMENTARY,
    ),
    Case(
        "harmony_preamble_then_final",
        "<|channel|>commentary<|message|>Checking.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done.",
        "",
        "<|channel|>commentary<|message|>Checking.<|end|>Done.",
    ),
    Case(
        "harmony_later_in_the_answer_is_text",
        "Harmony writes <|channel|>analysis<|message|> first.",
        "",
        "Harmony writes <|channel|>analysis<|message|> first.",
    ),
    Case(
        "not_ascii",
        "<think>réflexion ✓ 🎉</think>réponse: 東京",
        "réflexion ✓ 🎉",
        "réponse: 東京",
    ),
    Case("plain", "It is sunny in Paris.", "", "It is sunny in Paris."),
]


def cuts(text: str) -> Iterator[list[str]]:
    """`text` whole, and cut at every boundary into two and into three pieces."""
    yield [text]
    for i in range(len(text) + 1):
        yield [text[:i], text[i:]]
        for j in range(i, len(text) + 1):
            yield [text[:i], text[i:j], text[j:]]


def split(pieces: Iterable[str], opened_by_template: bool) -> tuple[str, str, ReasoningSplitter]:
    splitter = ReasoningSplitter(opened_by_template)
    reasoning, content = "", ""
    for piece in pieces:
        more_reasoning, more_content = splitter.feed(piece)
        assert splitter.held <= MAX_HELD
        reasoning += more_reasoning
        content += more_content
    last_reasoning, last_content = splitter.finish()
    assert splitter.held == 0
    return reasoning + last_reasoning, content + last_content, splitter


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_same_split_wherever_the_pieces_break(case: Case) -> None:
    for pieces in cuts(case.text):
        reasoning, content, splitter = split(pieces, case.opened_by_template)
        assert (reasoning, content) == (case.reasoning, case.content), pieces
        assert splitter.unopened_close is case.unopened_close, pieces


def test_reasoning_streams_as_it_arrives() -> None:
    splitter = ReasoningSplitter()
    assert splitter.feed("<think>") == ("", "")
    assert splitter.feed("The user") == ("The user", "")
    assert splitter.feed(" wants Paris.</th") == (" wants Paris.", "")
    assert splitter.held == len("</th")
    assert splitter.feed("ink>\n\n") == ("", "")
    assert splitter.feed("It is") == ("", "It is")
    assert splitter.plain


def test_plain_text_comes_straight_out() -> None:
    splitter = ReasoningSplitter()
    for piece in ["It", " is <", "think", "> sunny", "</think>", "."]:
        assert splitter.feed(piece) == ("", piece)
        assert splitter.held == 0
    assert splitter.plain
    assert splitter.finish() == ("", "")


def test_a_possible_opener_is_held_only_until_it_cannot_be_one() -> None:
    splitter = ReasoningSplitter()
    assert splitter.feed("\n<thi") == ("", "")
    assert splitter.held == len("\n<thi")
    assert splitter.feed("s is") == ("", "\n<this is")
    assert splitter.plain


def test_a_long_reasoning_piece_by_piece_holds_only_a_cut_marker() -> None:
    splitter = ReasoningSplitter()
    splitter.feed("<|channel|>analysis<|message|>")
    most = 0
    for char in "a<|b|>" * 200 + "<|end|":
        splitter.feed(char)
        most = max(most, splitter.held)
    assert most == len("<|end|")
    assert splitter.feed(">") == ("", "")
    assert splitter.finish() == ("", "")


def test_an_unopened_close_cut_across_pieces_is_noticed_once() -> None:
    splitter = ReasoningSplitter()
    assert splitter.feed("Hi") == ("", "Hi")
    assert not splitter.watch("thinking </th")
    assert splitter.watch("ink> answer")
    assert splitter.unopened_close and not splitter.watching


def test_give_up_releases_what_was_held_as_content() -> None:
    splitter = ReasoningSplitter()
    assert splitter.feed("  <thi") == ("", "")
    assert splitter.give_up() == "  <thi"
    assert splitter.plain and splitter.feed("<think>x") == ("", "<think>x")
