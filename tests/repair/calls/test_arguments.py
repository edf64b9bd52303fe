"""vLLM's argument leak (the tail of call N under call N+1), split at many points."""

from __future__ import annotations

import orjson
import pytest

from proxy.repair.calls.arguments import ArgumentMender
from tests.support.streams import assembled_calls, repair_stream, sse

CALLS = [
    {"city": "Paris", "units": "metric"},
    {"query": "weather {today}", "days": [1, 2]},
    {"path": "/tmp/a b.txt", "nested": {"x": "}"}},
]


def leaked(texts: list[str], cuts: list[int]) -> list[str]:
    """Move the last `cuts[i]` characters of call i to the front of call i+1."""
    out = list(texts)
    for i, cut in enumerate(cuts):
        if cut:
            out[i], out[i + 1] = out[i][:-cut], out[i][-cut:] + out[i + 1]
    return out


def stream_of(arguments: list[str]) -> bytes:
    envelope = {"id": "chatcmpl-l", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        {
            **envelope,
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": f"chatcmpl-tool-{i}",
                                "type": "function",
                                "function": {"name": f"tool_{i}", "arguments": text},
                            }
                        ]
                    },
                }
            ],
        }
        for i, text in enumerate(arguments)
    ]
    chunks.append(
        {**envelope, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    )
    return sse(*chunks, "[DONE]")


@pytest.mark.parametrize("count", [2, 3])
def test_leaked_tails_are_given_back_at_every_split_point(count: int) -> None:
    texts = [orjson.dumps(args).decode() for args in CALLS[:count]]
    cases = 0
    for first in range(len(texts[0])):
        for second in range(0, len(texts[1]), 3) if count == 3 else [0]:
            cuts = [first, second][: count - 1]
            out = repair_stream(stream_of(leaked(texts, cuts)))
            got = [orjson.loads(c["arguments"]) for c in assembled_calls(out)[0]]
            assert got == CALLS[:count], f"cuts {cuts}"
            cases += 1
    assert cases >= len(texts[0])


def test_empty_arguments_become_an_empty_object() -> None:
    out = repair_stream(stream_of(["", '{"a":1}']))
    assert [c["arguments"] for c in assembled_calls(out)[0]] == ["{}", '{"a":1}']


@pytest.mark.parametrize(
    "arguments",
    [
        ['{"a": 1}{"b"', ":2}"],  # the head of the next call in the previous one: not a leak
        ['{"a": ', '{"b": 2}'],  # truncated, and nothing to take it from
        ['{"a": 1', '}{"b": 2}{"c": 3}'],  # one value too many: no certain split
        ['{"a": 1'],  # a lone broken call
    ],
)
def test_anything_else_passes_as_received(arguments: list[str]) -> None:
    assert ArgumentMender().repair(arguments) is None
    out = repair_stream(stream_of(arguments))
    assert [c["arguments"] for c in assembled_calls(out)[0]] == arguments


def test_valid_arguments_are_untouched() -> None:
    assert ArgumentMender().repair(['{"a":1}', " [1, 2] "]) is None


def test_non_streamed_leak_and_empty_arguments_are_mended() -> None:
    import asyncio

    from proxy.repair.pipeline import RepairChain
    from proxy.repair.repairs.tool_calls import ToolCallRepair
    from proxy.repair.tally import Tally
    from tests.support.phases import forwarded

    def call(i: int, text: str) -> dict:
        return {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": text}}

    body = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "tool_calls": [call(0, '{"a": "x'), call(1, 'y"}{"b": 2}'), call(2, "")],
                },
            }
        ]
    }
    exchange = Tally("r")
    link = ToolCallRepair(forwarded(), exchange)
    assert asyncio.run(RepairChain([link], strict=True).on_response(body))
    texts = [c["function"]["arguments"] for c in body["choices"][0]["message"]["tool_calls"]]
    assert texts == ['{"a": "xy"}', '{"b": 2}', "{}"]
    assert exchange.repairs == {"arguments_leak": 2, "arguments_empty": 1}
