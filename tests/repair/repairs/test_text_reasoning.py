"""TextReasoningRepair (proxy/repair/repairs/text_reasoning.py): reasoning the upstream wrote as
`content` goes to the route's reasoning field(s), streamed and not; a choice whose upstream fills
a reasoning field itself is left alone; a plain choice's chunks come out untouched (None), so
their original bytes go on.

The first tests drive the link on its own with exact chunks; the last run the whole default
chain in-process (`repair_stream`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.repair.conformance import stream_chunks, violations
from proxy.repair.markup.rules import MarkupRules
from proxy.repair.pipeline import RepairChain
from proxy.repair.repairs import request_repairs, stream_links
from proxy.repair.repairs.content_parts import ContentPartsRepair
from proxy.repair.repairs.history import HistoryRepair
from proxy.repair.repairs.parameters import ParameterRepair
from proxy.repair.repairs.text_reasoning import TextReasoningRepair
from proxy.repair.repairs.text_tool_calls import TextToolCallRepair
from proxy.repair.repairs.tool_calls import ToolCallRepair
from proxy.repair.repairs.tool_schemas import ToolSchemaRepair
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.settings.chain import chain_options
from proxy.settings.schema import Settings
from proxy.store.memory_store import MemoryStore
from proxy.wire import json_codec
from tests.repair.markup.test_recogniser import WEATHER
from tests.support.phases import forwarded
from tests.support.streams import content, repair_stream, sse

ENVELOPE = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "qwq"}
FIELDS = {
    "reasoning_content": ("reasoning_content",),
    "reasoning": ("reasoning",),
    "both": ("reasoning_content", "reasoning"),
}


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {**ENVELOPE, "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def thought(text: str, field: str = "reasoning_content", **delta: Any) -> dict[str, Any]:
    """A delta carrying `text` in every field `field` names, and `delta`'s other keys."""
    return {**delta, **dict.fromkeys(FIELDS[field], text)}


def link(**rules: Any) -> tuple[TextReasoningRepair, Tally]:
    exchange = Tally(request_id="test")
    return TextReasoningRepair(MarkupRules(**rules), exchange), exchange


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "model": "qwq",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


# ── streamed ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("field", FIELDS)
def test_a_think_block_streams_into_the_reasoning_field(field: str) -> None:
    repair, exchange = link(reasoning_field=field)
    assert repair.on_chunk(chunk({"role": "assistant", "content": "<think>"})) == [
        chunk({"role": "assistant"})
    ]
    assert repair.on_chunk(chunk({"content": "The user"})) == [chunk(thought("The user", field))]
    assert repair.on_chunk(chunk({"content": " wants Paris.</think>\n\nIt"})) == [
        chunk(thought(" wants Paris.", field, content="It"))
    ]
    assert repair.on_chunk(chunk({"content": " is sunny."})) is None
    assert repair.on_chunk(chunk({}, "stop")) is None
    assert asyncio.run(repair.on_end()) == []
    assert exchange.repairs == {"reasoning_from_text": 1}


def test_harmony_analysis_and_final_stream_without_their_framing() -> None:
    repair, exchange = link(reasoning_field="reasoning")
    assert repair.on_chunk(chunk({"role": "assistant", "content": "<|channel|>analysis"})) == [
        chunk({"role": "assistant"})
    ]
    assert repair.on_chunk(chunk({"content": "<|message|>Weather asked.<|en"})) == [
        chunk({"reasoning": "Weather asked."})
    ]
    assert repair.on_chunk(
        chunk({"content": "d|><|start|>assistant<|channel|>final<|message|>Sunny"})
    ) == [chunk({"content": "Sunny"})]
    assert repair.on_chunk(chunk({"content": ".<|return|>"})) == [chunk({"content": "."})]
    assert exchange.repairs == {"reasoning_from_text": 1}


def test_harmony_commentary_goes_on_unchanged_for_the_tool_call_recogniser() -> None:
    repair, _ = link()
    call = (
        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>'
    )
    assert repair.on_chunk(chunk({"content": call[:9]})) == []  # held: could be analysis
    # Decided once the channel is `commentary`: its text goes on as it came, framing and all
    # (the messages after its `<|call|>` are told apart again, issue 27).
    assert repair.on_chunk(chunk({"content": call[9:20]})) == []
    assert repair.on_chunk(chunk({"content": call[20:21]})) == [chunk({"content": call[:21]})]
    assert repair.on_chunk(chunk({"content": call[21:]})) is None


def test_the_finish_chunk_carries_the_held_text_before_its_finish() -> None:
    repair, exchange = link()
    assert repair.on_chunk(chunk({"role": "assistant", "content": "\n<thi"})) == [
        chunk({"role": "assistant"})
    ]
    assert repair.on_chunk(chunk({}, "length")) == [chunk({"content": "\n<thi"}, "length")]
    assert exchange.repairs == {}

    repair, exchange = link(think_opened_by_template=True)
    assert repair.on_chunk(chunk({"content": "Hello</th"})) == [chunk(thought("Hello"))]
    assert repair.on_chunk(chunk({"content": "!"}, "stop")) == [chunk(thought("</th!"), "stop")]
    assert exchange.repairs == {"reasoning_from_text": 1}


def test_the_end_releases_what_unfinished_choices_hold() -> None:
    repair, _ = link()
    assert repair.on_chunk(chunk({"content": "<thi"})) == []  # nothing left to say: no shell
    assert repair.on_chunk(chunk({"content": "<think>r</"}, index=1)) == [
        chunk(thought("r"), index=1)
    ]
    assert asyncio.run(repair.on_end()) == [
        {**ENVELOPE, "choices": [{"index": 0, "delta": {"content": "<thi"}}]},
        {**ENVELOPE, "choices": [{"index": 1, "delta": thought("</")}]},
    ]


def test_opened_by_template_reasoning_until_the_close() -> None:
    repair, exchange = link(think_opened_by_template=True)
    assert repair.on_chunk(chunk({"role": "assistant", "content": ""})) is None
    assert repair.on_chunk(chunk({"content": "Greet back."})) == [chunk(thought("Greet back."))]
    assert repair.on_chunk(chunk({"content": "\n</think>\n\nHi!"})) == [
        chunk(thought("\n", content="Hi!"))
    ]
    assert repair.on_chunk(chunk({}, "stop")) is None
    assert exchange.repairs == {"reasoning_from_text": 1}


def test_an_unopened_close_is_left_as_text_and_counted_once() -> None:
    repair, exchange = link()
    assert repair.on_chunk(chunk({"role": "assistant", "content": "Greet back.\n</th"})) is None
    assert repair.on_chunk(chunk({"content": "ink>\n\nHi!"})) is None
    assert repair.on_chunk(chunk({"content": "</think>"})) is None
    assert repair.on_chunk(chunk({"content": "</think>"}, index=1)) is None
    assert exchange.repairs == {"reasoning_close_unopened": 2}  # once per choice


def test_plain_chunks_are_untouched_and_keep_their_bytes() -> None:
    repair, exchange = link()
    chain = RepairChain([repair], strict=True)
    for delta, finish in [
        ({"role": "assistant", "content": ""}, None),
        ({"content": "It is <think>"}, None),
        ({"content": " sunny."}, None),
        ({}, "stop"),
    ]:
        original = chunk(delta, finish)
        raw = json_codec.dumps(original)
        assert repair.on_chunk(chunk(delta, finish)) is None
        [(out, out_raw)] = chain.on_chunk(original, raw)
        assert out_raw is raw and out == chunk(delta, finish)
    assert exchange.repairs == {}


def test_an_upstream_that_sends_reasoning_itself_is_left_alone() -> None:
    repair, exchange = link(think_opened_by_template=True)
    assert repair.on_chunk(chunk({"role": "assistant", "reasoning_content": "Hmm."})) is None
    assert repair.on_chunk(chunk({"content": "<think>x</think>Hi"})) is None
    # With the content, on another choice: the held opener prefix goes back as content.
    assert repair.on_chunk(chunk({"content": "<th"}, index=1)) == []
    assert repair.on_chunk(chunk({"content": "ink>", "reasoning": "r"}, index=1)) == [
        chunk({"content": "<think>", "reasoning": "r"}, index=1)
    ]
    assert exchange.repairs == {}


def test_the_disabled_rule_turns_the_link_off() -> None:
    rules = RouteRules(markup=MarkupRules(text_reasoning=False))
    options = chain_options(Settings())
    links = stream_links(options, forwarded(rules=rules), Tally("t"), MemoryStore(1, 1))
    assert not any(isinstance(link, TextReasoningRepair) for link in links)
    body = completion({"role": "assistant", "content": "<think>r</think>a"})
    assert not asyncio.run(RepairChain(links, strict=True).on_response(body))
    assert body == completion({"role": "assistant", "content": "<think>r</think>a"})


# ── not streamed ─────────────────────────────────────────────────────────────


@pytest.mark.parametrize("field", FIELDS)
def test_a_completion_gets_its_reasoning_moved(field: str) -> None:
    repair, exchange = link(reasoning_field=field)
    body = completion({"role": "assistant", "content": "\n<think>r</think>\n\nIt is sunny."})
    assert asyncio.run(RepairChain([repair], strict=True).on_response(body))
    assert body == completion(thought("r", field, role="assistant", content="It is sunny."))
    assert exchange.repairs == {"reasoning_from_text": 1}


def test_a_completion_with_its_own_reasoning_or_plain_content_is_left_alone() -> None:
    repair, exchange = link()
    own = {"role": "assistant", "content": "<think>x</think>y", "reasoning": "r"}
    plain = {"role": "assistant", "content": "It is sunny."}
    for message in (own, plain):
        body = completion(dict(message))
        assert not asyncio.run(RepairChain([repair], strict=True).on_response(body))
        assert body == completion(message)
    assert exchange.repairs == {}


def test_a_completion_with_an_unopened_close_is_counted() -> None:
    repair, exchange = link()
    body = completion({"role": "assistant", "content": "Greet.</think>Hi!"})
    assert not asyncio.run(RepairChain([repair], strict=True).on_response(body))
    assert exchange.repairs == {"reasoning_close_unopened": 1}


# ── the default chain ────────────────────────────────────────────────────────


def test_it_runs_first_after_the_request_side_repairs() -> None:
    options = chain_options(Settings())
    store = MemoryStore(max_entries=1, ttl_seconds=1)
    request = [type(repair) for repair in request_repairs(options, store)]
    assert request[:3] == [HistoryRepair, ToolSchemaRepair, ParameterRepair]
    sent = forwarded({"messages": [], "tools": [WEATHER]})
    links = [type(link) for link in stream_links(options, sent, Tally("t"), store)]
    assert links[:4] == [
        TextReasoningRepair,
        TextToolCallRepair,
        ContentPartsRepair,
        ToolCallRepair,
    ]


def test_through_the_default_chain() -> None:
    body = sse(
        chunk({"role": "assistant", "content": "<think>Paris"}),
        chunk({"content": " first.</think>"}),
        chunk({"content": "\n\nSunny."}),
        chunk({}, "stop"),
        "[DONE]",
    )
    out = repair_stream(body)
    assert violations(out) == []
    reasoning = "".join(
        choice["delta"].get("reasoning_content") or ""
        for item in stream_chunks(out)
        if isinstance(item, dict)
        for choice in item["choices"]
    )
    assert reasoning == "Paris first."
    assert content(out) == {0: "Sunny."}


def test_a_finish_without_a_delta_gets_one_only_for_held_text() -> None:
    repair, _ = link()
    assert repair.on_chunk(chunk({"content": "<think>r</think"})) == [chunk(thought("r"))]
    bare = {**ENVELOPE, "choices": [{"index": 0, "finish_reason": "stop"}]}
    assert repair.on_chunk(bare) == [chunk(thought("</think"), "stop")]
    repair, _ = link()
    assert repair.on_chunk(chunk({"role": "assistant"})) is None
    bare = {**ENVELOPE, "choices": [{"index": 0, "finish_reason": "stop"}]}
    assert repair.on_chunk(bare) is None
    assert bare == {**ENVELOPE, "choices": [{"index": 0, "finish_reason": "stop"}]}
