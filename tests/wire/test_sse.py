"""SSE decoding: boundaries anywhere, every line ending, comments, multi-line data, U+2028."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.wire.sse import DONE, EventTooLarge, SSEDecoder, encode

STREAM = (
    b": keep-alive\n\n"
    b'data: {"a":"line\xe2\x80\xa8separator"}\n\n'
    b"event: ping\ndata: x\n\n"
    b"data: first\ndata: second\n\n"
    b"id: 7\nretry: 10\ndata:nospace\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    (None, None),
    ('{"a":"line\u2028separator"}', None),
    ("x", "ping"),
    ("first\nsecond", None),
    ("nospace", None),
    ("[DONE]", None),
]


def decode_in_parts(stream: bytes, cuts: list[int]) -> list:
    decoder = SSEDecoder()
    events = []
    previous = 0
    for cut in [*sorted(cuts), len(stream)]:
        events += decoder.feed(stream[previous:cut])
        previous = cut
    return events + decoder.flush()


@pytest.mark.parametrize("newline", [b"\n", b"\r", b"\r\n"])
def test_every_byte_offset_and_line_ending(newline: bytes) -> None:
    stream = STREAM.replace(b"\n", newline)
    for cut in range(len(stream) + 1):
        events = decode_in_parts(stream, [cut])
        assert [(e.data, e.event) for e in events] == EXPECTED, f"cut at {cut}"
        assert b"".join(e.raw for e in events) == stream, f"raw bytes lost at cut {cut}"


def test_byte_by_byte_keeps_raw_bytes() -> None:
    stream = STREAM.replace(b"\n", b"\r\n")
    events = decode_in_parts(stream, list(range(len(stream))))
    assert b"".join(e.raw for e in events) == stream


def test_u2028_is_not_a_line_break() -> None:
    events = SSEDecoder().feed('data: {"t":"a\u2028b\u2029c\x85d"}\n\n'.encode())
    assert len(events) == 1
    assert events[0].data == '{"t":"a\u2028b\u2029c\x85d"}'


def test_unterminated_last_event_is_delivered_on_flush() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]") == []
    (event,) = decoder.flush()
    assert event.data == "[DONE]"
    assert event.raw == b"data: [DONE]\n\n"  # terminated: see tests/wire/test_sse_framing.py


def test_trailing_cr_waits_for_a_possible_lf() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == []  # the second CR may still become CRLF
    (event,) = decoder.feed(b"\n")
    assert event.data == "a"
    assert event.raw == b"data: a\r\r\n"


def test_oversized_event_raises_instead_of_growing() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    decoder.feed(b"data: " + b"x" * 50)
    with pytest.raises(EventTooLarge):
        decoder.feed(b"x" * 100)


def test_encode_round_trips_through_decoder() -> None:
    chunk = {"choices": [{"delta": {"content": "a\u2028b\nc"}}]}
    (event,) = SSEDecoder().feed(encode(chunk) + DONE)[:1]
    assert event.data is not None
    assert orjson.loads(event.data) == chunk


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=8))
def test_random_cuts(cuts: list[int]) -> None:
    events = decode_in_parts(STREAM, cuts)
    assert [(e.data, e.event) for e in events] == EXPECTED


_LINES = st.sampled_from(
    [b'data: {"a": 1}', b"data:{}", b"data", b": comment", b"event: x", b"data: [DONE]", b""]
)


@given(st.lists(st.tuples(_LINES, st.sampled_from([b"\n", b"\r\n", b"\n\n"])), max_size=8))
def test_whole_events_in_one_piece_read_as_byte_by_byte(parts: list[tuple[bytes, bytes]]) -> None:
    """The one-pass reading of a piece of whole single-line events (the common framing) gives
    exactly the events the line-by-line reading gives, whatever the piece holds."""
    stream = b"".join(line + end for line, end in parts)
    whole = SSEDecoder()
    at_once = whole.feed(stream) + whole.flush()
    slow = SSEDecoder()
    one_by_one = [event for i in range(len(stream)) for event in slow.feed(stream[i : i + 1])]
    one_by_one += slow.flush()
    assert [(e.raw, e.data, e.event) for e in at_once] == [
        (e.raw, e.data, e.event) for e in one_by_one
    ]
    assert whole.splits == slow.splits
