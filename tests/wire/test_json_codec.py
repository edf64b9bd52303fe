"""json_codec: integers beyond 64 bits stay exact, whichever way the document is read."""

from __future__ import annotations

import orjson

from proxy.wire import json_codec


def test_an_integer_past_64_bits_reads_exact() -> None:
    assert json_codec.loads(b'{"n": 123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890
    }
    assert json_codec.loads('{"n": 1234567890123456789}')["n"] == 1234567890123456789


def test_eighteen_digits_and_split_runs_take_orjson_s_reading() -> None:
    text = b'{"a": 123456789012345678, "b": "1234567890-123456789", "c": 1.5}'
    assert json_codec.loads(text) == orjson.loads(text)


def test_a_long_run_inside_a_string_reads_the_same() -> None:
    text = b'{"id": "call_00000000000000000000000001", "n": 7}'
    assert json_codec.loads(text) == orjson.loads(text)


def test_dumps_writes_what_orjson_cannot() -> None:
    assert json_codec.dumps({"n": 2**70}) == b'{"n":1180591620717411303424}'
