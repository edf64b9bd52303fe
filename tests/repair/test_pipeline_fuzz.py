"""Fuzzing the whole pipeline: random chunk sequences (valid and broken JSON, random fields and
types where tool calls are expected), cut at random bytes. The repairs never raise (the chain
runs strict, so any exception fails the test), the output is well-formed SSE, and every event
that no repair needs to touch comes out byte-identical and in order."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.wire.sse import SSEDecoder
from tests.support.streams import repair_stream

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 5), st.text(max_size=6), st.floats(allow_nan=False)
)
ANY_JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
FUNCTION = st.one_of(
    ANY_JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(st.sampled_from(["read", "write", ""]), ANY_JSON),
            "arguments": st.one_of(st.sampled_from(['{"a":', "1}", "{}", ""]), ANY_JSON),
        },
    ),
)
TOOL_CALL = st.one_of(
    ANY_JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "index": st.one_of(st.integers(-1, 3), ANY_JSON),
            "id": st.one_of(st.sampled_from(["a", "b", ""]), ANY_JSON),
            "type": ANY_JSON,
            "function": FUNCTION,
            "extra_content": st.one_of(st.just({"google": {"thought_signature": "S"}}), ANY_JSON),
        },
    ),
)
DELTA = st.fixed_dictionaries(
    {},
    optional={
        "role": st.one_of(st.just("assistant"), ANY_JSON),
        "content": st.one_of(st.text(max_size=8), ANY_JSON),
        "tool_calls": st.one_of(st.lists(TOOL_CALL, max_size=3), ANY_JSON),
        "extra_content": ANY_JSON,
    },
)
CHOICE = st.one_of(
    ANY_JSON,
    st.fixed_dictionaries(
        {"delta": st.one_of(DELTA, ANY_JSON)},
        optional={
            "index": st.one_of(st.integers(0, 2), ANY_JSON),
            "finish_reason": st.one_of(st.sampled_from(["stop", "tool_calls", None]), ANY_JSON),
        },
    ),
)
CHUNK = st.fixed_dictionaries(
    {"choices": st.one_of(st.lists(CHOICE, max_size=3), ANY_JSON)},
    optional={"id": ANY_JSON, "usage": ANY_JSON, "model": ANY_JSON},
)

# Events that must pass byte for byte, whatever surrounds them.
UNTOUCHABLE = st.sampled_from(
    [
        b": keep-alive\n\n",
        b"data: not json\n\n",
        b'data: {"choices": [\n\n',
        b"data: [1, 2, 3]\n\n",
        b'event: ping\ndata: {"choices":[{"delta":{"tool_calls":[{}]}}]}\n\n',
        b"retry: 100\n\n",
        b'data: {"choices":[],"usage":{"total_tokens":1}}\r\n\r\n',
    ]
)


def chunk_event(chunk: object) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


EVENT = st.one_of(
    CHUNK.map(lambda c: (chunk_event(c), False)),
    UNTOUCHABLE.map(lambda raw: (raw, True)),
    st.just((b"data: [DONE]\n\n", False)),
)


@st.composite
def streams(draw) -> tuple[list[tuple[bytes, bool]], list[bytes]]:
    events = draw(st.lists(EVENT, max_size=12))
    body = b"".join(raw for raw, _ in events)
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=8)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    return events, pieces


def ends_as_an_answer(body: bytes) -> bool:
    """Whether the upstream's body ended as an answer: `[DONE]`, or a finish reason in an
    event with data (a chunk the links read: no event name, a JSON object)."""
    decoder = SSEDecoder()
    for event in decoder.feed(body) + decoder.flush():
        data = event.data
        if data is None:
            continue
        if data.strip() == "[DONE]":
            return True
        if event.event is not None or not data.startswith("{"):
            continue
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and choice.get("finish_reason") is not None:
                return True
    return False


def output_events(out: bytes) -> list[bytes]:
    decoder = SSEDecoder()
    return [event.raw for event in decoder.feed(out) + decoder.flush()]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.sampled_from(["auto", "atomic", "incremental"]))
def test_pipeline_never_raises_and_passes_untouchable_events_verbatim(case, emit) -> None:
    events, pieces = case
    out = repair_stream(b"", {"messages": []}, emit=emit, pieces=pieces)

    produced = output_events(out)
    if ends_as_an_answer(b"".join(pieces)):
        assert out.endswith(b"data: [DONE]\n\n")
        assert produced.count(b"data: [DONE]\n\n") == 1
    else:  # nothing said, or cut before any finish: an error, never an invented end
        assert b"data: [DONE]" not in out
        error = orjson.loads(produced[-1][len(b"data: ") :])["error"]
        assert error["code"] in ("upstream_no_events", "upstream_truncated")
    for raw in produced:
        assert raw.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")), raw  # every event is terminated
        data = b"".join(line[6:] for line in raw.splitlines() if line.startswith(b"data: "))
        if raw.startswith(b"data: {") and raw not in {e for e, _ in events}:
            assert isinstance(orjson.loads(data), dict)  # what the proxy wrote is valid JSON

    untouchable = [raw for raw, verbatim in events if verbatim]
    position = 0
    for raw in untouchable:  # in order, byte for byte
        position = produced.index(raw, position) + 1
