"""The refusal learning at the upstream seam (proxy/learning/refusals.py), in process: one send,
at most one resend, what was learned reported as a value and recalled for the next request, and
a rule added as one more table entry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest

from proxy.learning.parameter_fallback import PARAMETERS
from proxy.learning.refusal_memory import RefusalMemory
from proxy.learning.refusals import NOTHING, RULES, RefusalLearning, RefusalRule
from proxy.repair.profiles import PROFILES
from proxy.repair.rules import RouteRules
from proxy.store.memory_store import MemoryStore
from tests.support.rejecting_upstream import openai_unknown_parameter

URL = "http://upstream.invalid/v1/chat/completions"
OK = httpx.Response(200, json={"choices": []})


def learning(*rules: RefusalRule) -> RefusalLearning:
    return RefusalLearning(RefusalMemory(MemoryStore(100, 60.0), 60.0), rules or RULES)


class Upstream:
    """Answers each request with the next of `answers`, and keeps every body it was sent."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(orjson.loads(request.content))
        return self.answers.pop(0)


def outgoing(body: dict[str, Any]) -> httpx.Request:
    return httpx.Request("POST", URL, content=orjson.dumps(body))


def refusal(name: str, status: int = 400) -> httpx.Response:
    _, body = openai_unknown_parameter(name)
    return httpx.Response(status, content=body)


async def test_a_refusal_naming_a_parameter_is_sent_once_more_without_it_and_reported() -> None:
    seam = learning()
    body = {"model": "m", "messages": [], "store": True}
    upstream = Upstream(refusal("store"), OK)
    response, learned = await seam.send(upstream, "up", body, outgoing(body))
    assert response.status_code == 200
    assert upstream.bodies == [{"model": "m", "messages": [], "store": True}, body]
    assert "store" not in body  # the forwarded body is the one resent
    assert learned is not None
    assert (learned.kind, learned.status, learned.keys) == ("parameter_learned", 400, ("store",))
    recalled = await seam.recall("up", {"model": "m", "messages": [], "store": True})
    assert recalled != NOTHING
    assert await seam.recall("up", {"model": "other", "store": True}) == NOTHING


async def test_never_more_than_one_resend() -> None:
    seam = learning()
    body = {"model": "m", "messages": [], "store": True, "user": "u"}
    upstream = Upstream(refusal("store"), refusal("user"))
    response, learned = await seam.send(upstream, "up", body, outgoing(body))
    assert response.status_code == 400  # the second refusal reaches the client as it came
    assert orjson.loads(response.content)["error"]["message"].endswith("'user'.")
    assert len(upstream.bodies) == 2
    assert learned is not None and learned.keys == ("store",)


@pytest.mark.parametrize("status", [401, 404, 429, 500])
async def test_no_other_status_is_read_or_resent(status: int) -> None:
    seam = learning()
    body = {"model": "m", "messages": [], "store": True}
    upstream = Upstream(refusal("store", status))
    response, learned = await seam.send(upstream, "up", body, outgoing(body))
    assert (response.status_code, learned, len(upstream.bodies)) == (status, None, 1)
    assert body["store"] is True


async def test_a_failure_the_caller_made_of_the_send_passes_as_it_is() -> None:
    failed = object()

    async def dispatch(request: httpx.Request) -> httpx.Response | object:
        return failed

    body = {"model": "m", "store": True}
    assert await learning().send(dispatch, "up", body, outgoing(body)) == (failed, None)


async def test_what_was_learned_joins_the_profile_table_after_its_own_rules() -> None:
    seam = learning()
    body = {"model": "m", "messages": [], "store": True, "max_completion_tokens": 8}
    await seam.send(Upstream(refusal("store"), OK), "up", body, outgoing(body))
    recalled = await seam.recall("up", {"model": "m", "store": True, "max_completion_tokens": 8})
    mistral = PROFILES["mistral"]
    rules = RouteRules(profile=mistral)
    adjusted = recalled.applied(rules).profile
    assert adjusted.parameters[: len(mistral.parameters)] == mistral.parameters
    assert [rule.name for rule in adjusted.parameters[len(mistral.parameters) :]] == ["store"]
    assert NOTHING.applied(rules) is rules
    assert rules.profile is mistral  # the route's own value is never changed


class ToolChoiceRefused:
    """A made-up second rule, to show one is a table entry: a 422 saying "tool_choice required
    is not supported" is answered by sending `tool_choice` "auto"."""

    kind = "tool_choice_learned"
    statuses = frozenset({422})
    done = "naming %s; sent once more with tool_choice auto"
    remembers = True

    def detect(self, error: str, request: Mapping[str, Any]) -> tuple[str, ...]:
        said = "tool_choice required is not supported" in error
        return ("tool_choice:required",) if said and request.get("tool_choice") else ()

    def learns(self, rules: RouteRules) -> bool:
        return True

    def apply(self, body: dict[str, Any], keys: Iterable[str]) -> bool:
        body["tool_choice"] = "auto"
        return True

    def candidates(self, request: Mapping[str, Any]) -> list[str]:
        return ["tool_choice:required"] if request.get("tool_choice") == "required" else []

    def adjust(self, rules: RouteRules, keys: frozenset[str]) -> RouteRules:
        return replace(rules, tool_names=rules.tool_names + "+auto-tool-choice")


async def test_a_second_rule_is_one_more_table_entry_with_its_own_memory_keys() -> None:
    seam = learning(PARAMETERS, ToolChoiceRefused())
    body = {"model": "m", "messages": [], "tool_choice": "required", "store": True}
    said = b'{"error": {"message": "tool_choice required is not supported"}}'
    upstream = Upstream(httpx.Response(422, content=said), OK)
    response, learned = await seam.send(upstream, "up", body, outgoing(body))
    assert response.status_code == 200
    assert learned is not None and learned.kind == "tool_choice_learned"
    assert upstream.bodies[1]["tool_choice"] == "auto"
    assert upstream.bodies[1]["store"] is True  # the parameters rule read nothing it names
    recalled = await seam.recall("up", {"model": "m", "tool_choice": "required", "store": 1})
    applied = recalled.applied(RouteRules())
    assert applied.tool_names == "+auto-tool-choice"
    assert applied.profile.parameters == ()


SYSTEM_FIRST = httpx.Response(
    400, json={"error": {"message": "System message must be at the beginning."}}
)
TWO_SYSTEMS = {
    "model": "m",
    "messages": [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}],
}


async def test_a_request_rule_resends_what_the_request_phase_rebuilt_with_the_adjusted_rules() -> (
    None
):
    seam = learning()
    body = dict(TWO_SYSTEMS)
    asked: list[RouteRules] = []

    async def rebuild(rules: RouteRules) -> dict[str, Any]:
        asked.append(rules)
        return {"model": "m", "messages": [{"role": "system", "content": "a\n\nb"}]}

    upstream = Upstream(SYSTEM_FIRST, OK)
    response, learned = await seam.send(upstream, "up", body, outgoing(body), RouteRules(), rebuild)
    assert response.status_code == 200
    assert learned is not None and learned.kind == "system_messages_learned"
    assert [rules.messages.system_messages for rules in asked] == ["merged"]
    assert upstream.bodies[1]["messages"] == [{"role": "system", "content": "a\n\nb"}]
    recalled = await seam.recall("up", TWO_SYSTEMS)
    assert recalled.applied(RouteRules()).messages.system_messages == "merged"


async def test_a_request_rule_that_changes_nothing_or_cannot_be_rebuilt_is_not_resent() -> None:
    async def unchanged(rules: RouteRules) -> dict[str, Any]:
        return dict(TWO_SYSTEMS)

    for rebuild in (unchanged, None):
        seam = learning()
        body = dict(TWO_SYSTEMS)
        upstream = Upstream(SYSTEM_FIRST)
        response, learned = await seam.send(
            upstream, "up", body, outgoing(body), RouteRules(), rebuild
        )
        assert (response.status_code, learned, len(upstream.bodies)) == (400, None, 1)
        assert await seam.recall("up", TWO_SYSTEMS) == NOTHING


async def test_a_key_the_route_set_explicitly_is_not_learned() -> None:
    seam = learning()
    body = dict(TWO_SYSTEMS)
    explicit = replace(RouteRules(), learnable=frozenset())

    async def rebuild(rules: RouteRules) -> dict[str, Any]:
        raise AssertionError("never rebuilt")

    upstream = Upstream(SYSTEM_FIRST)
    response, learned = await seam.send(upstream, "up", body, outgoing(body), explicit, rebuild)
    assert (response.status_code, learned, len(upstream.bodies)) == (400, None, 1)
