"""json_codec: integers beyond 64 bits stay exact, whichever way the document is read; the
other writers keep orjson's layouts."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

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


def test_a_document_nested_as_deep_as_orjson_writes_reads_and_writes_back() -> None:
    levels = json_codec.MAX_DEPTH
    deepest = b"[" * levels + b"123456789012345678901234567890" + b"]" * levels
    value = json_codec.loads(deepest)
    assert json_codec.dumps({"echoed": value})  # one level more: the standard library writes it


@pytest.mark.parametrize("levels", [json_codec.MAX_DEPTH + 1, 1010])
def test_a_document_nested_deeper_is_refused_as_malformed(levels: int) -> None:
    """orjson reads 1024 levels: one read and then written again (a front's event echoing a
    request field, a store write) raised RecursionError or TypeError, a 500 on every door."""
    with pytest.raises(json_codec.JSONDecodeError, match="nested deeper than 254 levels"):
        json_codec.loads(b"[" * levels + b"]" * levels)
    with pytest.raises(json_codec.JSONDecodeError):
        json_codec.loads(b'{"a": ' + b"[" * levels + b"1" * 25 + b"]" * levels + b"}")


def test_brackets_inside_strings_are_no_nesting() -> None:
    text = b'{"a": "' + b"[" * 600 + b"{" * 600 + b'"}'
    assert json_codec.loads(text) == {"a": "[" * 600 + "{" * 600}


ORDINARY = {"b": [1, {}, []], "a": {"x": "é \u2028 \x1f", "y": 1.5, "z": None}, "c": True}


def test_the_layouts_are_orjson_s_own() -> None:
    # Every module that wrote orjson's options writes through these: not a byte moved.
    assert json_codec.dumps_indented(ORDINARY) == orjson.dumps(ORDINARY, option=orjson.OPT_INDENT_2)
    assert json_codec.dumps_sorted(ORDINARY) == orjson.dumps(ORDINARY, option=orjson.OPT_SORT_KEYS)


def test_the_layouts_write_what_orjson_cannot_the_same_way() -> None:
    big = {**ORDINARY, "n": 2**70}
    small = {**ORDINARY, "n": 7}
    expected = orjson.dumps(small, option=orjson.OPT_INDENT_2).replace(
        b": 7", b": 1180591620717411303424"
    )
    assert json_codec.dumps_indented(big) == expected
    sorted_small = orjson.dumps(small, option=orjson.OPT_SORT_KEYS)
    assert json_codec.dumps_sorted(big) == sorted_small.replace(b":7", b":1180591620717411303424")


def test_a_log_line_writes_what_json_has_no_type_for_as_text() -> None:
    line = {"path": Path("/tmp/x"), "error": ValueError("no")}
    assert json_codec.dumps_with_str(line) == b'{"path":"/tmp/x","error":"no"}'
    assert json_codec.dumps_with_str({**line, "n": 2**70}) == (
        b'{"path":"/tmp/x","error":"no","n":1180591620717411303424}'
    )


def test_parses_answers_as_orjson_reads() -> None:
    assert json_codec.parses('{"a": [1, 2]}')
    assert json_codec.parses(b"123456789012345678901234567890")
    assert not json_codec.parses('{"a": [1, 2')
    assert not json_codec.parses("")
    # No depth guard: the arguments it is asked of pass on as text, read by the client.
    assert json_codec.parses("[" * 300 + "]" * 300)


def test_a_str_that_is_no_utf_8_is_malformed_json() -> None:
    # A lone surrogate: what orjson says of it, not an encoding error the callers would miss.
    with pytest.raises(json_codec.JSONDecodeError):
        json_codec.loads('{"a": "\ud800"}')
    assert not json_codec.parses('{"a": "\ud800"}')
