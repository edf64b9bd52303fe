"""Input tokens per byte, learned per upstream and model (proxy/learning/token_ratios.py), in
process: the first answer sets the ratio, the next few are averaged in, an odd one moves it by
a share only, a request that cannot teach (small, with an image, a report no text gives) is not
learned from, and what was learned comes back in the refusal learning's one lookup."""

from __future__ import annotations

import math
from typing import Any

import pytest

from proxy.learning.refusal_memory import RefusalMemory
from proxy.learning.refusals import RefusalLearning
from proxy.learning.token_ratios import (
    GUESSED,
    MEMORY_KEY,
    MIN_BYTES,
    SMOOTHING,
    TokenRatio,
    TokenRatios,
    measure,
)
from proxy.store.memory_store import MemoryStore

BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "x" * 4000}]}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def memory() -> RefusalMemory:
    return RefusalMemory(MemoryStore(100, 60.0), 60.0)


def test_the_guess_is_a_token_per_four_bytes_and_never_zero_for_a_request() -> None:
    assert GUESSED.estimate(4000) == 1000
    assert GUESSED.estimate(1) == 1
    assert GUESSED.estimate(0) == 0
    assert GUESSED.said() == "estimate"


def test_the_first_answer_sets_the_ratio_and_the_next_are_averaged_then_weighted() -> None:
    first = GUESSED.after(0.3)
    assert first == TokenRatio(0.3, 1)
    second = first.after(0.4)
    assert second.tokens_per_byte == pytest.approx(0.35) and second.answers == 2
    ratio = second
    for _ in range(10):
        ratio = ratio.after(0.3)
    assert ratio.answers == SMOOTHING  # bounded: the record never grows
    odd = ratio.after(0.9)  # one odd answer moves it by a quarter of the difference
    moved = (0.9 - ratio.tokens_per_byte) / SMOOTHING
    assert odd.tokens_per_byte == pytest.approx(ratio.tokens_per_byte + moved)
    assert odd.said() == f"learned; tokens_per_byte={odd.tokens_per_byte:.4f}; answers=4"


def test_what_teaches_nothing() -> None:
    assert measure(1000, 4000) == 0.25
    assert measure(None, 4000) is None
    assert measure(0, 4000) is None
    assert measure(100, MIN_BYTES - 1) is None  # the template's own tokens weigh too much
    assert measure(4000, 2000) is None  # two tokens a byte: no text
    assert measure(10, 400_000) is None  # an image's base64: the count does not see it


async def test_learned_and_recalled_per_upstream_and_model() -> None:
    ratios = TokenRatios(memory())
    learned = ratios.learn("up", BODY, None, 1300, 4000)
    assert learned == TokenRatio(1300 / 4000, 1)
    assert await ratios.recall("up", "m") == learned
    assert await ratios.recall("up", "other") is None
    assert await ratios.recall("other", "m") is None
    # The next exchange recalled it, so its answer is averaged in.
    again = ratios.learn("up", BODY, learned, 1100, 4000)
    assert again is not None and again.answers == 2
    assert again.tokens_per_byte == pytest.approx(0.3)
    assert await ratios.recall("up", "m") == again


async def test_a_request_with_an_image_teaches_nothing() -> None:
    ratios = TokenRatios(memory())
    body = {**BODY, "messages": [{"role": "user", "content": [{"type": "text"}, IMAGE]}]}
    assert ratios.learn("up", body, None, 1300, 400_000) is None
    assert ratios.learn("up", body, None, 30_000, 100_000) is None  # within bounds, still
    assert await ratios.recall("up", "m") is None


async def test_a_steady_ratio_is_not_written_again() -> None:
    store = MemoryStore(100, 60.0)
    ratios = TokenRatios(RefusalMemory(store, 60.0))
    steady = TokenRatio(0.3, SMOOTHING)
    assert ratios.learn("up", BODY, steady, 1201, 4000) == steady  # would move it by 0.02 %
    assert len(store) == 0
    moved = ratios.learn("up", BODY, steady, 2000, 4000)
    assert moved is not None and len(store) == 1
    assert await ratios.recall("up", "m") == moved


async def test_a_stored_record_that_is_not_one_is_not_read() -> None:
    store = MemoryStore(100, 60.0)
    remembered = RefusalMemory(store, 60.0)
    ratios = TokenRatios(remembered)
    for value in (
        {"tokens_per_byte": "0.3", "answers": 1},
        {"tokens_per_byte": 5.0, "answers": 1},
        {"tokens_per_byte": 0.3, "answers": 0},
        {"tokens_per_byte": 0.3, "answers": True},
    ):
        await store.put_many({remembered.key("up", "m", MEMORY_KEY): value})
        assert await ratios.recall("up", "m") is None, value


async def test_the_ratio_comes_back_in_the_refusal_learnings_one_lookup() -> None:
    learning = RefusalLearning(memory())
    request = {"model": "m", "messages": [], "temperature": 0.2}
    assert (await learning.recall("up", request, tokens=True)).tokens is None
    learning.tokens.learn("up", BODY, None, 1300, 4000)
    recalled = await learning.recall("up", request, tokens=True)
    assert recalled.tokens == TokenRatio(0.325, 1)
    # A door that says no input tokens of its own asks for none: nothing looked up for it.
    assert (await learning.recall("up", request)).tokens is None
    assert recalled.keys == ()  # no refusal rule learned anything
    assert recalled.tokens.estimate(10_000) == math.ceil(10_000 * 0.325)
