"""Property tests: any valid stream of k calls, cut into random fragments, reassembles to the
same calls; and repairing already-repaired output changes nothing."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.repair.conformance import stream_chunks, violations
from tests.support.streams import assembled_calls, finish_reasons, repair_stream, sse

NAMES = st.sampled_from(["read", "write", "search_web", "get_weather", "bash"])
VALUES = st.one_of(
    st.text(max_size=12),
    st.integers(-5, 10**6),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=3),
)
ARGUMENTS = st.dictionaries(st.text(min_size=1, max_size=8), VALUES, max_size=4)


@st.composite
def tool_call_streams(draw):
    """(calls, sse body, byte pieces) for a stream of 1-4 calls in random fragments."""
    calls = [
        {
            "id": f"call_{i}_{draw(st.text('abcdef0123', min_size=4, max_size=8))}",
            "name": draw(NAMES),
            "arguments": orjson.dumps(draw(ARGUMENTS)).decode(),
        }
        for i in range(draw(st.integers(1, 4)))
    ]
    keyed_by = draw(st.sampled_from(["index", "id"]))
    envelope = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def entry(i: int, opening: bool, piece: str) -> dict:
        out: dict = {"index": i} if keyed_by == "index" else {"id": calls[i]["id"]}
        out["function"] = {"arguments": piece}
        if opening:
            out.update(id=calls[i]["id"], type="function")
            out["function"]["name"] = calls[i]["name"]
        return out

    queues = []
    for i, call in enumerate(calls):
        text = call["arguments"]
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=5)))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        queues.append([entry(i, n == 0, piece) for n, piece in enumerate(pieces)])
    chunks = [{**envelope, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    opened: list[int] = []
    while any(queues):
        # Calls open in order; once open, their fragments interleave at random.
        candidates = [i for i in opened if queues[i]]
        if len(opened) < len(calls):
            candidates.append(len(opened))
        i = draw(st.sampled_from(candidates))
        if i not in opened:
            opened.append(i)
        chunks.append(
            {**envelope, "choices": [{"index": 0, "delta": {"tool_calls": [queues[i].pop(0)]}}]}
        )
    finish = draw(st.sampled_from(["tool_calls", "stop"]))
    chunks.append({**envelope, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    body = sse(*chunks, "[DONE]")
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=6)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    return calls, body, pieces


def normalized(calls: list[dict]) -> list[tuple]:
    return [(c["id"], c["name"], orjson.loads(c["arguments"])) for c in calls]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool_call_streams(), st.sampled_from(["auto", "atomic", "incremental"]))
def test_fragments_reassemble_to_the_same_calls(case, emit) -> None:
    calls, _, pieces = case
    out = repair_stream(b"", emit=emit, pieces=pieces)
    assert violations(out, emit) == []
    assert normalized(assembled_calls(out)[0]) == normalized(calls)
    assert finish_reasons(out) == {0: ["tool_calls"]}


@settings(max_examples=100, deadline=None)
@given(tool_call_streams(), st.sampled_from(["auto", "atomic", "incremental"]))
def test_repairing_repaired_output_changes_nothing(case, emit) -> None:
    _, body, _ = case
    once = repair_stream(body, emit=emit)
    twice = repair_stream(once, emit=emit)
    assert stream_chunks(twice) == stream_chunks(once)
