"""The answer watch reads the answer as the client gets it, and claims no finish the client
never got: a non-streamed choice with a null finish stays without one (its one-event trip
reads it as "stop" for the links, and folds it back to null)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.repair.answer_watch import AnswerWatch
from proxy.repair.pipeline import RepairChain
from proxy.repair.tally import Tally


def whole(finish: str | None) -> dict[str, Any]:
    message = {"role": "assistant", "content": "hi"}
    return {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


@pytest.mark.parametrize(
    ("finish", "claimed"), [(None, []), ("stop", ["stop"]), ("length", ["length"])]
)
async def test_a_whole_answers_finish_is_the_one_the_client_gets(
    finish: str | None, claimed: list[str]
) -> None:
    tally = Tally("rid")
    chain = RepairChain([AnswerWatch(tally)], strict=True)
    body = whole(finish)
    await chain.on_response(body)
    assert body["choices"][0]["finish_reason"] == finish
    assert tally.answer is not None
    assert tally.answer.finish_reasons == claimed
    assert (tally.answer.model, tally.answer.id) == ("m", "chatcmpl-1")


def test_moonshots_usage_inside_the_finishing_choice_is_read() -> None:
    """Moonshot streams its usage inside the last choice, not beside `choices` (transcript
    `kimi_per_round_ids`); a usage beside `choices` is the one read when both are there."""
    tally = Tally("rid")
    watch = AnswerWatch(tally)
    usage = {"prompt_tokens": 233, "completion_tokens": 41, "total_tokens": 274}
    choice = {"index": 0, "delta": {}, "finish_reason": "tool_calls", "usage": usage}
    watch.on_chunk({"id": "c", "model": "kimi", "choices": [choice]})
    assert tally.answer is not None
    assert (tally.answer.input_tokens, tally.answer.output_tokens) == (233, 41)
    beside = {"prompt_tokens": 300, "completion_tokens": 50}
    watch.on_chunk({"id": "c", "model": "kimi", "choices": [choice], "usage": beside})
    assert (tally.answer.input_tokens, tally.answer.output_tokens) == (300, 50)
