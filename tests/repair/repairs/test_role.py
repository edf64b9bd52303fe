"""SingleRoleRepair: `role` once per choice, and no empty shells left behind."""

from __future__ import annotations

from proxy.repair.repairs.role import SingleRoleRepair
from proxy.repair.tally import Tally

ENVELOPE = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gemini"}


def chunk(delta: dict, **extra) -> dict:
    return {**ENVELOPE, "choices": [{"index": 0, "delta": delta}], **extra}


def test_the_first_role_stays_and_later_ones_go() -> None:
    repair = SingleRoleRepair(Tally(request_id="test"))
    assert repair.on_chunk(chunk({"role": "assistant", "content": "a"})) is None
    out = repair.on_chunk(chunk({"role": "assistant", "content": "b"}))
    assert out == [chunk({"content": "b"})]


def test_a_chunk_that_carried_only_the_repeated_role_is_dropped() -> None:
    # Gemini: role on every delta; once the tool-call repair holds the fragment back, the
    # role is all that is left, and the client would get `"delta": {}` once per fragment.
    repair = SingleRoleRepair(Tally(request_id="test"))
    repair.on_chunk(chunk({"role": "assistant", "content": "a"}))
    assert repair.on_chunk(chunk({"role": "assistant"})) == []


def test_a_role_only_chunk_with_anything_else_to_say_is_kept() -> None:
    repair = SingleRoleRepair(Tally(request_id="test"))
    repair.on_chunk(chunk({"role": "assistant", "content": "a"}))
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    with_usage = repair.on_chunk(chunk({"role": "assistant"}, usage=usage))
    assert with_usage == [chunk({}, usage=usage)]
    with_extra = repair.on_chunk(chunk({"role": "assistant"}, provider="x"))
    assert with_extra == [chunk({}, provider="x")]
    finishing = {
        **ENVELOPE,
        "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": "stop"}],
    }
    assert repair.on_chunk(finishing) == [
        {**ENVELOPE, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    ]


def test_an_empty_delta_from_the_upstream_passes_untouched() -> None:
    repair = SingleRoleRepair(Tally(request_id="test"))
    repair.on_chunk(chunk({"role": "assistant", "content": "a"}))
    assert repair.on_chunk(chunk({})) is None
