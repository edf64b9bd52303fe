"""SSE framing the proxy sends is always valid, even when the upstream's was not.

- A last event with no blank line after it: the proxy's `[DONE]` used to be glued onto its
  data line (`data: {...}data: [DONE]`), so neither reached the client as an event.
- Single-newline framing (MiniMax as captured by a Go project): every `data:` line of the body
  is one event under the SSE rules, which no client can read. Lines that are JSON chunks each
  on their own are delivered as separate events; lines that are one JSON text together stay one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.repair.conformance import stream_chunks, violations
from proxy.wire.sse import DONE, SSEDecoder, terminated
from tests.support.fake_upstream import byte_chunks, load_transcript, running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.streams import assembled_calls, content, finish_reasons, repair_stream

MINIMAX = "minimax_single_newline_events"
UNTERMINATED = "openai_unterminated_last_event"
EMITS = ("auto", "atomic", "incremental")


def decode(body: bytes, pieces: list[bytes] | None = None) -> tuple[list, SSEDecoder]:
    decoder = SSEDecoder()
    events = []
    for piece in pieces if pieces is not None else [body]:
        events += decoder.feed(piece)
    return events + decoder.flush(), decoder


# ── the decoder ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize("line_end", [b"", b"\n", b"\r", b"\r\n"])
def test_flush_terminates_the_open_last_event(line_end: bytes) -> None:
    (event,), _ = decode(b'data: {"a":1}' + line_end)
    assert event.data == '{"a":1}'
    # Whatever is written after it is an event of its own.
    events, _ = decode(event.raw + DONE)
    assert [e.data for e in events] == ['{"a":1}', "[DONE]"]


def test_terminated_leaves_a_terminated_event_alone() -> None:
    for raw in (b"data: x\n\n", b"data: x\r\n\r\n", b"data: x\r\r", b"data: x\n\r"):
        assert terminated(raw) == raw


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"])
def test_single_newline_separated_json_lines_are_separate_events(line_end: bytes) -> None:
    body = line_end.join([b'data: {"n":1}', b": comment", b'data: {"n":2}', b"data: [DONE]"])
    events, decoder = decode(body + line_end)
    assert [e.data for e in events] == ['{"n":1}', '{"n":2}', "[DONE]"]
    assert decoder.splits == 2
    again, _ = decode(b"".join(e.raw for e in events))  # re-framed: valid SSE as sent
    assert [e.data for e in again] == ['{"n":1}', '{"n":2}', "[DONE]"]


def test_data_lines_that_parse_together_stay_one_event() -> None:
    body = b'data: {"a":\ndata: {"b": 1}}\n\ndata: first\ndata: second\n\n'
    events, decoder = decode(body)
    assert [e.data for e in events] == ['{"a":\n{"b": 1}}', "first\nsecond"]
    assert decoder.splits == 0
    assert b"".join(e.raw for e in events) == body


def test_a_typed_event_is_never_split() -> None:
    (event,), _ = decode(b'event: error\ndata: {"a":1}\ndata: {"b":2}\n\n')
    assert event.data == '{"a":1}\n{"b":2}'


@given(st.lists(st.integers(0, 200), max_size=6))
def test_splitting_does_not_depend_on_where_the_bytes_were_cut(cuts: list[int]) -> None:
    body = load_transcript(MINIMAX).sse
    bounds = [0, *sorted(c % (len(body) + 1) for c in cuts), len(body)]
    pieces = [body[a:b] for a, b in pairwise(bounds)]
    whole, _ = decode(body)
    cut, _ = decode(body, pieces)
    assert [(e.data, e.raw) for e in cut] == [(e.data, e.raw) for e in whole]


def test_a_normal_stream_costs_no_json_parse_in_the_decoder(monkeypatch) -> None:
    import proxy.wire.sse

    def no_parse(raw: bytes) -> None:
        raise AssertionError("the decoder parsed JSON for a well-framed stream")

    monkeypatch.setattr(proxy.wire.sse.json_codec, "loads", no_parse)
    body = load_transcript("openai_indexed_fragmented").sse
    events, decoder = decode(body, byte_chunks(body))
    assert len(events) == body.count(b"\n\n") and decoder.splits == 0


# ── the pipeline in-process ──────────────────────────────────────────────────


@pytest.mark.parametrize("emit", EMITS)
def test_the_done_after_an_unterminated_last_event_is_an_event_of_its_own(emit: str) -> None:
    out = repair_stream(load_transcript(UNTERMINATED).sse, emit=emit)
    assert violations(out, emit) == []
    assert finish_reasons(out) == {0: ["stop"]}
    assert out.endswith(b'"finish_reason":"stop"}]}\n\n' + DONE)


@pytest.mark.parametrize("trailing", [b"\n", b""])
@pytest.mark.parametrize("emit", EMITS)
def test_single_newline_framing_comes_out_as_one_event_per_chunk(
    emit: str, trailing: bytes
) -> None:
    name = MINIMAX
    body = load_transcript(name).sse.rstrip(b"\n") + trailing
    out = repair_stream(body, {"messages": [], **load_transcript(name).meta["request"]}, emit=emit)
    assert violations(out, emit) == []
    want = load_transcript(name).meta["expect"]["choices"][0]
    assert content(out) == {0: want["content"]}
    assert finish_reasons(out) == {0: ["tool_calls"]}
    ((call,),) = assembled_calls(out).values()
    assert (call["id"], call["name"]) == (want["tool_calls"][0]["id"], "get_weather")


# ── end to end: the real proxy and the OpenAI SDK ─────────────────────────────


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running_fake_upstream() as (_, root):
        yield f"{root}/v1"


@pytest.fixture(scope="module")
def proxy(upstream: str) -> Iterator[str]:
    with running_proxy(upstream) as url:
        yield url


def completion(base_url: str, name: str) -> openai.types.chat.ParsedChatCompletion:
    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0, timeout=30)
    tools = load_transcript(name).meta["request"]["tools"]
    with client.chat.completions.stream(
        model=name,
        messages=[{"role": "user", "content": "go"}],
        **({"tools": tools} if tools else {}),
    ) as stream:
        for _ in stream:
            pass
        return stream.get_final_completion()


def events_split(proxy: str) -> float:
    text = httpx.get(f"{proxy}/metrics", timeout=10).text
    match = re.search(
        r'^streamfix_repairs_total\{kind="events_split",route="default"\} (\S+)$', text, re.M
    )
    return float(match.group(1)) if match else 0.0


def test_openai_sdk_reads_a_single_newline_framed_stream_through_the_proxy(
    proxy: str, upstream: str
) -> None:
    client = openai.OpenAI(base_url=upstream, api_key="test-key", max_retries=0, timeout=30)
    direct = client.chat.completions.create(model=MINIMAX, messages=[], stream=True)
    assert list(direct) == []  # directly the SDK reads not a single chunk
    before = events_split(proxy)
    (choice,) = completion(f"{proxy}/v1", MINIMAX).choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.role == "assistant"
    assert choice.message.content == "Let me look that up."
    ((call),) = choice.message.tool_calls or []
    assert (call.id, call.function.name, call.function.arguments) == (
        "call_mm_01",
        "get_weather",
        '{"city":"Kyiv"}',
    )
    assert events_split(proxy) == before + 4  # five chunks, one event each


def test_openai_sdk_gets_the_finish_of_an_unterminated_last_event(
    proxy: str, upstream: str
) -> None:
    (direct,) = completion(upstream, UNTERMINATED).choices
    assert direct.finish_reason is None  # a client drops an event that was never terminated
    raw = httpx.post(
        f"{proxy}/v1/chat/completions",
        json={"model": UNTERMINATED, "stream": True, "messages": []},
        timeout=30,
    ).content
    assert stream_chunks(raw)[-1] == "[DONE]"
    (choice,) = completion(f"{proxy}/v1", UNTERMINATED).choices
    assert (choice.finish_reason, choice.message.content) == ("stop", "All done.")
