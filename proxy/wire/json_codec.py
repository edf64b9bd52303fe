"""JSON for bodies the proxy parses and may re-encode: orjson, exact for every integer.

orjson reads an integer beyond 64 bits as a float (`123456789012345678901234567890` becomes
`1.2345678901234568e+29`) and cannot write one at all. A repair that re-encodes a body must not
change a number the client or the upstream sent, so a document that may hold such an integer is
read by the standard library instead, which keeps integers exact, and written by it when orjson
refuses. Only documents with a run of 19 or more digits can hold one: everything else takes the
fast path.

A document nested deeper than orjson writes (`MAX_DEPTH`) is refused as malformed: orjson reads
1024 levels, and the standard library (the fallback both ways) recurses on the interpreter's
stack, 1000 frames in all. Read, such a document would fail later, wherever it was written
again (a front's event echoing a request field, a store write) or shown in an error. No request
or answer nests anywhere near that deep.

Every module of the package reads and writes JSON through this one (tests/test_layers.py
checks that only it imports orjson). `loads` and `dumps` are the common case; the others each
name what their callers need besides: a layout (`dumps_indented`, `dumps_sorted`), values JSON
has no type for (`dumps_with_str`), or only whether a text parses (`parses`, on a stream's
per-chunk path).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# 2**63 has 19 digits: any integer orjson could get wrong has at least that many. A run inside a
# string also counts; it then costs a slower parse with the same result. Found by mapping every
# ASCII digit to "0" and everything else to a space and looking for 19 zeros in a row: what
# `re.search(rb"\d{19,}")` finds, in a tenth of its time (about 0.5 µs for a 200-byte stream
# event, where the regex took 3, on every event of every stream).
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_RUN = b"0" * 19

MAX_DEPTH = 254
"""How deep a document may nest: as deep as orjson writes."""

JSONDecodeError = orjson.JSONDecodeError  # a subclass of json.JSONDecodeError (ValueError)


def loads(raw: bytes | str) -> Any:
    try:
        data = raw.encode() if isinstance(raw, str) else raw
    except UnicodeEncodeError as exc:  # a lone surrogate: no JSON text, as orjson says of it
        raise JSONDecodeError(f"str is not valid UTF-8: {exc.reason}", "", exc.start) from None
    value = orjson.loads(data)  # validates; raises JSONDecodeError on bad input
    if _nested_too_deep(data, value):
        raise JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", "", 0)
    if _LONG_RUN not in data.translate(_DIGITS_AS_ZEROS):
        return value
    return json.loads(data)


def _nested_too_deep(data: bytes, value: Any) -> bool:
    """Whether orjson could not write `value` (read from `data`) back. A document shorter than
    twice `MAX_DEPTH` cannot nest that deep (every stream event); any other is asked of orjson,
    which writes about 2.5 GB/s, faster than counting its brackets would be (bytes.count,
    twice). orjson read any integer past 64 bits as a float, so depth is all it can refuse."""
    if len(data) <= 2 * MAX_DEPTH:
        return False
    try:
        orjson.dumps(value)
    except TypeError:  # "Recursion limit reached"
        return True
    return False


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # "Integer exceeds 64-bit range"
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def dumps_indented(value: Any) -> bytes:
    """`value` indented two spaces a level, `": "` after each key: a document a person reads (a
    cassette, a command's `--json`). The standard library writes what orjson cannot, in the
    same layout."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except TypeError:  # "Integer exceeds 64-bit range"
        return json.dumps(value, ensure_ascii=False, indent=2).encode()


def dumps_sorted(value: Any) -> bytes:
    """`dumps` with every object's keys in sorted order: one text for equal documents, whatever
    order their keys came in (what identifies a request for replay, a schema's cache key)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # "Integer exceeds 64-bit range"
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def dumps_with_str(value: Any) -> bytes:
    """`dumps` for a log line, which must always be written: a value JSON has no type for (an
    exception, a path) is written as its `str()`."""
    try:
        return orjson.dumps(value, default=str)
    except TypeError:  # "Integer exceeds 64-bit range"
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode()


def parses(raw: bytes | str) -> bool:
    """Whether `raw` is JSON, nothing kept of what it says: asked of a streamed call's arguments
    so far on every chunk that may end them (repair/calls/assembly.py), so at orjson's cost
    alone. Neither guard applies, as neither could change the answer: no integer is kept to be
    rounded, and a document deeper than `MAX_DEPTH` is still JSON to the client that reads it
    (the proxy passes the arguments on as text)."""
    try:
        orjson.loads(raw)
    except JSONDecodeError:
        return False
    return True
