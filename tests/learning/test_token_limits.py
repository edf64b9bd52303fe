"""The completion budget's refusals (proxy/learning/refusal_rules.py TOKEN_LIMIT_RULES): each
real body reads as the number it says, for the budget the request sent; a budget is only ever
lowered; the model's limit is remembered and applied up front, the context's room is not."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.learning.parameter_fallback import PARAMETERS
from proxy.learning.refusal_memory import RefusalMemory
from proxy.learning.refusal_rules import FITTED_KIND, LIMIT_LEARNED_KIND, TOKEN_LIMIT_RULES
from proxy.learning.refusals import RULES, RefusalLearning
from proxy.repair.profiles import PROFILES
from proxy.repair.rules import RouteRuleKeys, RouteRules, resolve
from proxy.store.memory_store import MemoryStore
from proxy.wire.config_values import ConfigError
from tests.support.limit_upstreams import (
    deepseek_budget,
    ollama_cloud_budget,
    openai_budget,
    openai_context,
    prompt_tokens,
    vllm_context,
    volcengine_budget,
)
from tests.support.refusing_upstream import Checker

LIMIT, FIT = TOKEN_LIMIT_RULES
USER = {"role": "user", "content": "read a.txt and say what it says"}


def refusal(checker: Checker, body: dict[str, Any]) -> str:
    rejection = checker(body, orjson.dumps(body))
    assert rejection is not None
    return rejection[2].decode()


def detected(error: str, body: dict[str, Any]) -> tuple[str, tuple[str, ...]] | None:
    """The first rule of the seam's table that reads the refusal, as the seam tries them."""
    for rule in RULES:
        if 400 in rule.statuses and (keys := rule.detect(error, body)):
            return rule.kind, keys
    return None


BODY = {"model": "m", "messages": [USER], "max_tokens": 64000}
LIMITS = [
    ("deepseek", deepseek_budget(8192), BODY, 8192),
    ("openai", openai_budget(16384), BODY, 16384),
    ("volcengine", volcengine_budget(12288), {**BODY, "max_completion_tokens": 32000}, 12288),
    ("ollama_cloud", ollama_cloud_budget(65536), {**BODY, "max_tokens": 384000}, 65536),
]
TEXTS = [
    # DashScope (open-webui#10507), Groq (groq-moa#8, Roo-Code#5136): bodies with no fake here.
    ("<400> InternalError.Algo.InvalidParameter: Range of max_tokens should be [1, 8192]", 8192),
    ("max_tokens for `llama-3.1-8b-instant` must be less than or equal to 8000", 8000),
    (
        "`max_tokens` must be less than or equal to `40960`, the maximum value for `max_tokens` "
        "is less than the `context_window` for this model",
        40960,
    ),
]


@pytest.mark.parametrize(("name", "checker", "body", "limit"), LIMITS, ids=lambda v: str(v))
def test_each_upstreams_limit_is_read_from_its_own_body(
    name: str, checker: Checker, body: dict[str, Any], limit: int
) -> None:
    error = refusal(checker, body)
    assert detected(error, body) == (LIMIT_LEARNED_KIND, (f"max_tokens_limit={limit}",))
    assert PARAMETERS.detect(error, body) == ()  # never a parameter to drop


@pytest.mark.parametrize(("text", "limit"), TEXTS)
def test_the_other_upstreams_words_for_a_limit(text: str, limit: int) -> None:
    error = orjson.dumps({"error": {"message": text, "type": "invalid_request_error"}}).decode()
    assert LIMIT.detect(error, BODY) == (f"max_tokens_limit={limit}",)
    assert LIMIT.detect(text, BODY) == (f"max_tokens_limit={limit}",)  # plain text too


@pytest.mark.parametrize("checker", [vllm_context(4096), openai_context(4096)])
def test_the_context_refusal_is_the_room_this_prompt_leaves_and_not_remembered(
    checker: Checker,
) -> None:
    body = {**BODY, "max_tokens": 32000}
    room = 4096 - prompt_tokens(body)
    assert detected(refusal(checker, body), body) == (FITTED_KIND, (f"max_tokens_fit={room}",))
    assert not FIT.remembers and FIT.candidates(body) == []
    assert LIMIT.remembers and LIMIT.candidates(body) == ["max_tokens_limit"]


def test_a_budget_is_never_raised() -> None:
    """A refusal naming a number at or over what the request asked is not about its budget."""
    error = refusal(deepseek_budget(8192), BODY)
    for asked in (8192, 4000):
        assert LIMIT.detect(error, {**BODY, "max_tokens": asked}) == ()
    body = dict(BODY)
    assert LIMIT.apply(body, ["max_tokens_limit=8192"]) and body["max_tokens"] == 8192
    small = {**BODY, "max_tokens": 100, "max_completion_tokens": 9000}
    assert LIMIT.apply(small, ["max_tokens_limit=8192"])
    assert (small["max_tokens"], small["max_completion_tokens"]) == (100, 8192)
    assert not LIMIT.apply({**BODY, "max_tokens": 100}, ["max_tokens_limit=8192"])


def test_a_refusal_repeating_another_budget_or_leaving_no_room_is_not_read() -> None:
    other = refusal(openai_budget(16384), {**BODY, "max_tokens": 50000})
    assert LIMIT.detect(other, BODY) == ()  # "is too large: 50000", this request asked 64000
    full = {**BODY, "messages": [{"role": "user", "content": "word " * 5000}]}
    assert FIT.detect(refusal(vllm_context(4096), full), full) == ()  # the prompt alone passes
    crowded = {**BODY, "messages": [{"role": "user", "content": "word " * 4000}]}
    error = refusal(vllm_context(4096), {**crowded, "max_tokens": 200})
    assert FIT.detect(error, {**crowded, "max_tokens": 200}) != ()
    assert FIT.detect(error, crowded) == ()  # says 200, this one asked 64000


def test_nothing_for_a_request_without_a_budget_or_another_status() -> None:
    error = refusal(deepseek_budget(8192), BODY)
    assert LIMIT.detect(error, {"model": "m", "messages": [USER]}) == ()
    assert LIMIT.detect(error, {**BODY, "max_tokens": True}) == ()  # a flag is no count
    assert LIMIT.statuses == FIT.statuses == frozenset({400})


def test_the_route_key_learns_when_auto_and_clamps_when_a_number() -> None:
    auto = resolve(RouteRuleKeys(), PROFILES["generic"])
    assert auto.max_tokens_limit == 0 and LIMIT.learns(auto) and FIT.learns(auto)
    for value in ("none", 4000, "4000"):
        rules = resolve(RouteRuleKeys(max_tokens_limit=value), PROFILES["generic"])
        assert not LIMIT.learns(rules) and not FIT.learns(rules)
        assert rules.max_tokens_limit == (0 if value == "none" else 4000)
    for wrong in ("big", 0, -1, True, "8k"):
        with pytest.raises(ConfigError, match="max_tokens_limit"):
            RouteRuleKeys(max_tokens_limit=wrong)


def test_adjust_sets_the_limit_from_its_key_and_keeps_a_lower_one() -> None:
    rules = RouteRules()
    assert LIMIT.adjust(rules, frozenset({"max_tokens_limit=8192"})).max_tokens_limit == 8192
    lower = RouteRules(max_tokens_limit=4000)
    assert LIMIT.adjust(lower, frozenset({"max_tokens_limit=8192"})).max_tokens_limit == 4000
    assert LIMIT.adjust(rules, frozenset({"schema_dialect:gemini"})) is rules
    assert FIT.adjust(rules, frozenset({"max_tokens_fit=100"})) is rules


async def test_the_limit_is_remembered_with_its_number_and_recalled_whole() -> None:
    memory = RefusalMemory(MemoryStore(100, 60), 60)
    seam = RefusalLearning(memory)
    memory.remember("up", "m", ["max_tokens_limit=8192"], 400)
    recalled = await seam.recall("up", BODY)
    assert recalled.applied(RouteRules()).max_tokens_limit == 8192
    assert await memory.recall_keys("up", "m", ["max_tokens_limit"]) == {"max_tokens_limit=8192"}
    assert await memory.recall_keys("up", "other", ["max_tokens_limit"]) == set()
    nothing = await seam.recall("up", {"model": "m", "messages": [USER]})  # no budget asked
    assert nothing.applied(RouteRules()) == RouteRules()
