"""A known limit of the recogniser, kept as a strict xfail so that it is seen (and so that it
fails loudly the day it is lifted): fences are runs of three backticks, not CommonMark's
line-aware fences. The README says so."""

from __future__ import annotations

import pytest

from tests.repair.markup.test_recogniser import CALL, recognise

OPEN = {"messages": [], "tools": [{"type": "function", "function": {"name": "get_weather"}}]}


@pytest.mark.parametrize(
    "answer",
    [
        # A four-backtick fence showing a three-backtick one (how models show nested code):
        # the inner ``` does not close the outer fence in Markdown, but toggles here.
        "````markdown\n```\n" + CALL + "\n```\n````",
        # A tilde fence is a fence in CommonMark too.
        "~~~\n" + CALL + "\n~~~",
    ],
)
@pytest.mark.xfail(
    strict=True,
    reason="Fences are counted as runs of three backticks anywhere; CommonMark's fences (a run "
    "of three or more backticks or tildes opening a line, closed only by a run as long) need "
    "line-aware state in the recogniser, a change to its fence model.",
)
def test_markup_in_a_markdown_fence_of_any_form_stays_text(answer: str) -> None:
    texts, calls, _ = recognise([answer])
    assert calls == [] and "".join(texts) == answer
