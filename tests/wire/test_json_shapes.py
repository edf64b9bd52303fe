"""One reading of wrongly shaped JSON for every repair (proxy/wire/json_shapes.py)."""

from __future__ import annotations

from proxy.repair.calls.assembly import CallAssembler
from proxy.repair.chunks import choice_index, choices_of
from proxy.wire.json_shapes import integer, objects_in


def test_objects_in_keeps_only_the_objects_of_an_array() -> None:
    assert objects_in([{"a": 1}, 2, "x", None, {"b": 2}]) == [{"a": 1}, {"b": 2}]
    assert objects_in(None) == []
    assert objects_in({"a": 1}) == []
    assert objects_in("[{}]") == []


def test_a_boolean_is_not_an_integer() -> None:
    assert integer(3) == 3
    assert integer(0) == 0
    assert integer(True) is None
    assert integer(False) is None
    assert integer(1.0) is None
    assert integer("1") is None


def test_choices_and_calls_read_a_boolean_index_alike() -> None:
    # `"index": true` once meant choice 1 to the chunk helpers and no index to call assembly.
    chunk = {"choices": [{"index": True, "delta": {}}, "junk"]}
    assert [choice_index(c) for c in choices_of(chunk)] == [0]
    assembler = CallAssembler()
    [call] = assembler.add([{"index": True, "id": "c1", "function": {"name": "f"}}])
    assert call.upstream_indexes == set()
