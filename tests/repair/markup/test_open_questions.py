"""Behaviour found by the adversarial pass that needs a design decision, not a local fix: each
test states what arguably should happen and is expected to fail until that is decided."""

from __future__ import annotations

import pytest

from proxy.repair.conformance import violations
from tests.repair.markup.test_recogniser import CALL, REQUEST, recognise
from tests.repair.repairs.test_text_tool_calls_adversarial import content_stream
from tests.support.streams import assembled_calls, finish_reasons, repair_stream

OPEN = {"messages": [], "tools": [{"type": "function", "function": {"name": "get_weather"}}]}


@pytest.mark.xfail(
    strict=True,
    reason="orjson reads an integer past 64 bits as a float, so the call delivers "
    "1.2345678901234568e+29 for the 123456789012345678901234567890 the model wrote: a changed "
    "value. Refusing needs the parser to say it rounded (orjson cannot); keeping it needs "
    "another JSON reader for the families that write JSON.",
)
def test_an_integer_past_64_bits_in_json_arguments_is_not_changed() -> None:
    big = 123456789012345678901234567890
    answer = f'<tool_call>{{"name": "get_weather", "arguments": {{"n": {big}}}}}</tool_call>'
    texts, calls, _ = recognise([answer], request=OPEN)
    if calls:
        assert calls[0].arguments == f'{{"n":{big}}}'
    else:
        assert "".join(texts) == answer


@pytest.mark.xfail(
    strict=True,
    reason="A call that closed before a length cut is delivered (the span is whole) and the "
    "finish stays 'length' (a cut answer must not look finished), which conformance flags as "
    "'sent calls but finished with length'. Deliver it with 'tool_calls', keep 'length' and "
    "drop the call, or let conformance accept it: a design choice.",
)
def test_a_whole_call_before_a_length_cut_is_conformant() -> None:
    body = repair_stream(content_stream(CALL + " and then I", [7, 40], finish="length"), REQUEST)
    assert violations(body) == []


@pytest.mark.xfail(
    strict=True,
    reason="Only ``` fences make markup text; a model showing the format in inline code "
    "(`<tool_call>…</tool_call>`) gets a real call made of its example, and the client sees "
    "'Use `` to call it.'. Treating single-backtick spans as code needs a rule for where an "
    "inline span ends (a lone backtick is common in prose).",
)
def test_markup_in_inline_code_stays_text() -> None:
    answer = "Use `" + CALL + "` to call it."
    texts, calls, _ = recognise([answer])
    assert calls == [] and "".join(texts) == answer


@pytest.mark.xfail(
    strict=True,
    reason="A refused span goes out as text without being scanned for fences: its '```' "
    "opens a code block on the client, yet the markup after it (inside that block as the "
    "client renders it) is still made a call. Scanning released spans for fences changes "
    "what a refusal sends next; needs a decision on whether fences inside markup count.",
)
def test_markup_after_a_fence_opened_inside_a_refused_span_stays_text() -> None:
    refused = '<tool_call>{"name": "get_weather", "arguments": {"town": "```"}}</tool_call>\n'
    answer = refused + CALL + "\n```"
    texts, calls, _ = recognise([answer])
    assert calls == [] and "".join(texts) == answer


@pytest.mark.xfail(
    strict=True,
    reason="Mistral's servers reject any call id but 9 alphanumerics; a model that repeats a "
    "[CALL_ID] gets the duplicate replaced by the call-id repair (call_ids.py) with "
    "call_<24 hex>, which the next Mistral request rejects. The replacement would need the "
    "family's id shape, which that repair does not know.",
)
def test_a_repeated_mistral_call_id_is_replaced_by_one_mistral_accepts() -> None:
    answer = (
        '[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{"city": "Paris"}'
        '[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{"city": "Rome"}'
    )
    body = repair_stream(content_stream("x " + answer, [5, 50]), REQUEST)
    ids = [call["id"] for call in assembled_calls(body)[0]]
    assert finish_reasons(body) == {0: ["tool_calls"]}
    assert len(set(ids)) == 2 and all(len(i) == 9 and i.isalnum() for i in ids)


@pytest.mark.xfail(
    strict=True,
    reason="No reasoning repair moves <think> out of content yet (MarkupRules.reasoning "
    "names one), so a call the model drafted while thinking becomes a real call, and the "
    "think block stays content. vLLM separates reasoning before parsing tools; whether the "
    "recogniser should treat an open <think> like a fence, or wait for text_reasoning, is open.",
)
def test_markup_inside_a_think_block_is_not_a_call() -> None:
    answer = "<think>I could call " + CALL + " maybe</think>The answer."
    body = repair_stream(content_stream(answer, [3, 20, 50]), REQUEST)
    assert 0 not in assembled_calls(body)


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
