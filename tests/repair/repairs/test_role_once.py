"""`role: "assistant"` exactly once per choice, on the first delta the client receives.

Two upstream shapes broke it: a delta carrying the role together with a whole call and the
finish (Gemini, xAI), which the proxy splits so the call goes out first, and upstreams that
never send a role (GLM through Mistral's API). The OpenAI SDK's stream helper then ends with
`message.role = None`: through the proxy for the first shape (directly it was fine), directly
and through the proxy for the second.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.repair.conformance import stream_chunks
from proxy.repair.repairs.role import SingleRoleRepair
from proxy.repair.tally import Tally
from tests.support.fake_upstream import load_transcript, running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.streams import repair_stream

ENVELOPE = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

# Transcripts whose role the proxy must place: moved (the first two), added (the third), and
# Gemini's role on every delta (the fourth) for contrast.
ROLE_CASES = [
    "gemini_whole_call_with_role_and_finish",
    "openai_call_role_finish_one_chunk",
    "openai_no_role",
    "gemini_indexless_call_stop",
]
EMITS = ("auto", "atomic", "incremental")


def chunk(*choices: dict[str, Any]) -> dict[str, Any]:
    return {**ENVELOPE, "choices": list(choices)}


def request_of(name: str) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": "go"}],
        **load_transcript(name).meta["request"],
    }


def roles_per_choice(body: bytes) -> dict[int, list[tuple[int, Any]]]:
    """Per choice: (position among that choice's deltas, role) for every delta with a role."""
    seen: dict[int, int] = {}
    roles: dict[int, list[tuple[int, Any]]] = {}
    for item in stream_chunks(body):
        if not isinstance(item, dict):
            continue
        for choice in item.get("choices") or ():
            index = choice.get("index", 0)
            position = seen.get(index, 0)
            seen[index] = position + 1
            delta = choice.get("delta") or {}
            if "role" in delta:
                roles.setdefault(index, []).append((position, delta["role"]))
    return roles


# ── the repair on its own ────────────────────────────────────────────────────


def test_a_first_delta_without_role_gets_it_and_is_counted() -> None:
    exchange = Tally(request_id="test")
    repair = SingleRoleRepair(exchange)
    out = repair.on_chunk(chunk({"index": 0, "delta": {"content": "a"}}))
    assert out == [chunk({"index": 0, "delta": {"content": "a", "role": "assistant"}})]
    assert repair.on_chunk(chunk({"index": 0, "delta": {"content": "b"}})) is None
    assert exchange.repairs["role_added"] == 1


def test_a_role_that_arrives_late_is_dropped_after_the_one_added_first() -> None:
    repair = SingleRoleRepair(Tally(request_id="test"))
    repair.on_chunk(chunk({"index": 0, "delta": {"tool_calls": [{"index": 0}]}}))
    finishing = chunk({"index": 0, "delta": {"role": "assistant"}, "finish_reason": "stop"})
    assert repair.on_chunk(finishing) == [chunk({"index": 0, "delta": {}, "finish_reason": "stop"})]


def test_a_null_or_empty_role_on_the_first_delta_becomes_assistant() -> None:
    for role in (None, ""):
        repair = SingleRoleRepair(Tally(request_id="test"))
        (out,) = repair.on_chunk(chunk({"index": 0, "delta": {"role": role, "content": "a"}}))
        assert out["choices"][0]["delta"] == {"role": "assistant", "content": "a"}


def test_the_upstreams_own_first_role_is_left_untouched_and_not_counted() -> None:
    exchange = Tally(request_id="test")
    repair = SingleRoleRepair(exchange)
    assert repair.on_chunk(chunk({"index": 0, "delta": {"role": "assistant"}})) is None
    assert not exchange.repairs


def test_each_choice_gets_its_role_on_its_own_first_delta() -> None:
    repair = SingleRoleRepair(Tally(request_id="test"))
    # Choice 1 without a delta has nothing the client reads yet: untouched, not started.
    first = chunk({"index": 0, "delta": {"role": "assistant", "content": "a"}}, {"index": 1})
    assert repair.on_chunk(first) is None
    (second,) = repair.on_chunk(
        chunk({"index": 0, "delta": {"content": "b"}}, {"index": 1, "delta": {"content": "c"}})
    )
    assert second["choices"][0]["delta"] == {"content": "b"}
    assert second["choices"][1]["delta"] == {"content": "c", "role": "assistant"}


# ── the chain: the role lands on the first delta as the client receives it ──


@pytest.mark.parametrize("emit", EMITS)
@pytest.mark.parametrize("name", ROLE_CASES)
def test_the_client_gets_the_role_once_on_its_first_delta(name: str, emit: str) -> None:
    out = repair_stream(load_transcript(name).sse, request_of(name), emit=emit)
    assert roles_per_choice(out) == {0: [(0, "assistant")]}


# ── end to end: the real proxy and the OpenAI SDK ─────────────────────────────


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running_fake_upstream() as (_, root):
        yield f"{root}/v1"


@pytest.fixture(scope="module", params=EMITS)
def proxy(request: pytest.FixtureRequest, upstream: str) -> Iterator[str]:
    with running_proxy(upstream, **{"tool_calls.emit": request.param}) as url:
        yield url


def final_message(base_url: str, name: str) -> Any:
    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0, timeout=30)
    tools = load_transcript(name).meta["request"]["tools"]
    with client.chat.completions.stream(
        model=name, messages=[{"role": "user", "content": "go"}], tools=tools
    ) as stream:
        for _ in stream:
            pass
        return stream.get_final_completion().choices[0].message


@pytest.mark.parametrize("name", ROLE_CASES)
def test_openai_sdk_stream_helper_ends_with_role_assistant(proxy: str, name: str) -> None:
    message = final_message(f"{proxy}/v1", name)
    assert message.role == "assistant"
    assert message.tool_calls and message.tool_calls[0].function.name


def test_directly_the_one_chunk_call_keeps_its_role_and_a_roleless_upstream_has_none(
    upstream: str,
) -> None:
    # What the proxy must not make worse, and what it must make better.
    assert final_message(upstream, "openai_call_role_finish_one_chunk").role == "assistant"
    assert final_message(upstream, "openai_no_role").role is None


def test_the_added_role_is_counted_in_the_metrics(proxy: str) -> None:
    def role_added() -> float:
        text = httpx.get(f"{proxy}/metrics", timeout=10).text
        match = re.search(
            r'^streamfix_repairs_total\{kind="role_added",route="default"\} (\S+)$', text, re.M
        )
        return float(match.group(1)) if match else 0.0

    before = role_added()
    final_message(f"{proxy}/v1", "openai_no_role")
    assert role_added() == before + 1
