"""A completion budget over what the upstream takes, learned from its refusal through the real
proxy under uvicorn with no configuration, by the real clients of each door: openai-python on
chat completions (`max_tokens`, `max_completion_tokens`) and on the Responses API
(`max_output_tokens`), the Anthropic SDK on Messages (Claude Code's `max_tokens: 32000`).

The upstream is RefusingUpstream (tests/support/refusing_upstream.py) on 127.0.0.1, model "m"
(no vendor anywhere: only the wire can say it), refusing as DeepSeek, OpenAI, Volcengine or
vLLM does with their real bodies (tests/support/limit_upstreams.py). A model's limit: the
first request is refused once and sent once more with the budget lowered to the limit, the
next goes lowered at once, one send; a budget under the limit is never raised. The context's
room (vLLM's): each such request gets its one resend fitted to its own prompt, and nothing is
remembered. A key set explicitly is never learned over; a second refusal reaches the client as
it came; two proxies sharing a real Redis learn the limit once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import anthropic
import openai
import orjson
import pytest
import redis

from proxy.routing.rules_view import learned
from proxy.settings.schema import ReceiptSettings, Settings
from tests.support.limit_upstreams import (
    deepseek_budget,
    openai_budget,
    prompt_tokens,
    vllm_context,
    volcengine_budget,
)
from tests.support.proxies import running_proxy
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.refusing_upstream import (
    ANSWER_PREFIX,
    Checker,
    RefusingUpstream,
    running_refusing_upstream,
)
from tests.support.waiting import wait_until

QUESTION = "read a.txt and tell me what it says"
Ask = Callable[[str, int], tuple[dict[str, int], str]]
"""Asks through one door with this budget: the repairs the proxy counted, and the answer."""


def counted(headers: Any) -> dict[str, int]:
    said = headers.get("x-streamfix-repairs", "none")
    if said == "none":
        return {}
    return {kind: int(n) for kind, n in (item.split(":") for item in said.split(","))}


def chat(parameter: str) -> Ask:
    def ask(proxy: str, budget: int) -> tuple[dict[str, int], str]:
        client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-test", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="m",
            messages=[{"role": "user", "content": QUESTION}],
            **{parameter: budget},  # type: ignore[arg-type]
        )
        return counted(raw.headers), raw.parse().choices[0].message.content or ""

    return ask


def responses(proxy: str, budget: int) -> tuple[dict[str, int], str]:
    client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-test", max_retries=0)
    raw = client.responses.with_raw_response.create(
        model="m", input=QUESTION, max_output_tokens=budget
    )
    return counted(raw.headers), raw.parse().output_text


def messages(proxy: str, budget: int) -> tuple[dict[str, int], str]:
    """Streamed, as Claude Code asks (the SDK wants a stream for a budget this large)."""
    client = anthropic.Anthropic(base_url=proxy, api_key="sk-test", max_retries=0)
    with client.messages.stream(
        model="m", max_tokens=budget, messages=[{"role": "user", "content": QUESTION}]
    ) as stream:
        answer = stream.get_final_message()
        headers = stream.response.headers
    assert answer.stop_reason == "end_turn"
    return counted(headers), "".join(b.text for b in answer.content if b.type == "text")


# (door, the upstream's refusal, the budget the client asks, the upstream's limit, the chat
# parameter the door sends it as)
DOORS: dict[str, tuple[Ask, Checker, int, int, str]] = {
    "chat_max_tokens_deepseek": (
        chat("max_tokens"),
        deepseek_budget(8192),
        32000,
        8192,
        "max_tokens",
    ),
    "chat_max_completion_tokens_volcengine": (
        chat("max_completion_tokens"),
        volcengine_budget(12288),
        32000,
        12288,
        "max_completion_tokens",
    ),
    "responses_max_output_tokens_openai": (
        responses,
        openai_budget(16384),
        64000,
        16384,
        "max_tokens",
    ),
    "messages_max_tokens_deepseek": (messages, deepseek_budget(8192), 32000, 8192, "max_tokens"),
}


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[RefusingUpstream, str]]:
    fake = RefusingUpstream(request.param)
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        yield fake, proxy


@pytest.mark.parametrize(
    ("door", "served"), [(name, door[1]) for name, door in DOORS.items()], indirect=["served"]
)
def test_the_models_limit_is_learned_after_one_resend_and_applied_up_front(
    served: tuple[RefusingUpstream, str], door: str
) -> None:
    fake, proxy = served
    ask, _, budget, limit, parameter = DOORS[door]
    first, answer = ask(proxy, budget)
    assert answer.startswith(ANSWER_PREFIX)
    assert first == {"max_tokens_limit_learned": 1}
    assert fake.refused() == [True, False]  # one refused send, its one resend
    refused, resent = fake.bodies()
    assert refused[parameter] == budget and resent[parameter] == limit
    assert {k: v for k, v in resent.items() if k != parameter} == {
        k: v for k, v in refused.items() if k != parameter
    }

    later, answer = ask(proxy, budget)
    assert answer.startswith(ANSWER_PREFIX)
    assert later == {"max_tokens_clamped": 1}
    assert fake.refused() == [True, False, False]  # one send, lowered before it went
    assert fake.bodies()[2] == resent

    # A budget under the limit is the client's, never raised: its bytes go up untouched.
    small, _ = ask(proxy, 1000)
    assert small == {}
    assert fake.bodies()[3][parameter] == 1000
    assert fake.refused() == [True, False, False, False]


def test_the_contexts_room_is_fitted_to_each_prompt_and_never_remembered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """vLLM counts the prompt with its own tokenizer: each request too large for the room its
    own prompt leaves gets one resend with exactly that room, and a request that fits goes
    once, its budget as the client asked."""
    fake = RefusingUpstream(vllm_context(4096))
    long = QUESTION + " and" * 600
    caplog.set_level("WARNING", "proxy")
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        client = anthropic.Anthropic(base_url=proxy, api_key="sk-test", max_retries=0)

        def ask(text: str, budget: int) -> dict[str, int]:
            with client.messages.stream(
                model="m", max_tokens=budget, messages=[{"role": "user", "content": text}]
            ) as stream:
                assert stream.get_final_message().stop_reason == "end_turn"
                return counted(stream.response.headers)

        assert ask(QUESTION, 32000) == {"max_tokens_fitted": 1}
        assert ask(long, 32000) == {"max_tokens_fitted": 1}
        assert ask(QUESTION, 2000) == {}
    assert fake.refused() == [True, False, True, False, False]
    bodies = fake.bodies()
    assert bodies[1]["max_tokens"] == 4096 - prompt_tokens(bodies[0])
    assert bodies[3]["max_tokens"] == 4096 - prompt_tokens(bodies[2])
    assert bodies[3]["max_tokens"] < bodies[1]["max_tokens"]  # the longer prompt, less room
    assert bodies[4]["max_tokens"] == 2000
    lines = [r.getMessage() for r in caplog.records if "max_tokens_fitted" in r.getMessage()]
    assert len(lines) == 2 and all(
        line.endswith("(the room depends on the prompt)") for line in lines
    )


def test_a_second_refusal_reaches_the_client_as_it_came_and_nothing_goes_a_third_time() -> None:
    """DeepSeek's limit at 8192, behind a vLLM whose context leaves this prompt less: the
    resend lowered to 8192 is refused for the context, and that refusal is the client's."""
    limit, context = deepseek_budget(8192), vllm_context(6000)

    def refuses(body: dict[str, Any], raw: bytes) -> Any:
        return limit(body, raw) or context(body, raw)

    fake = RefusingUpstream(refuses)
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-test", max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": QUESTION}], max_tokens=32000
            )
    assert len(fake.received) == 2
    second = context(fake.bodies()[1], fake.received[1])
    assert second is not None
    assert refused.value.response.content == second[2]


def test_a_key_set_explicitly_is_never_learned_over() -> None:
    """ "none" relays the refusal as it came, each time; a number lowers to itself and nothing
    is learned beside it."""
    fake = RefusingUpstream(deepseek_budget(8192))
    with running_refusing_upstream(fake) as base_url:
        with running_proxy(base_url, **{"upstream.max_tokens_limit": "none"}) as proxy:
            client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="sk-test", max_retries=0)
            for _ in range(2):
                with pytest.raises(openai.BadRequestError):
                    client.chat.completions.create(
                        model="m",
                        messages=[{"role": "user", "content": QUESTION}],
                        max_tokens=32000,
                    )
        assert fake.refused() == [True, True]  # each sent once, as it came
        with running_proxy(base_url, **{"upstream.max_tokens_limit": 4000}) as proxy:
            assert [chat("max_tokens")(proxy, 32000)[0] for _ in range(2)] == [
                {"max_tokens_clamped": 1}
            ] * 2
    assert [b["max_tokens"] for b in fake.bodies()] == [32000, 32000, 4000, 4000]
    assert fake.refused() == [True, True, False, False]


def test_two_proxies_sharing_a_redis_learn_the_limit_once() -> None:
    fake = RefusingUpstream(deepseek_budget(8192))
    with running_refusing_upstream(fake) as base_url:
        for server in started_redis_server():
            fake.received.clear()
            config = {"receipts.store": server.url}
            with running_proxy(base_url, **config) as proxy_a:
                assert messages(proxy_a, 32000)[0] == {"max_tokens_limit_learned": 1}
            wait_until(lambda s=server: learned_keys(s), "the learned limit in redis")
            with running_proxy(base_url, **config) as proxy_b:
                assert messages(proxy_b, 32000)[0] == {"max_tokens_clamped": 1}
            assert fake.refused() == [True, False, False]  # proxy B lowered it at once
            assert [b["max_tokens"] for b in fake.bodies()] == [32000, 8192, 8192]
            keys = learned_keys(server)
            assert len(keys) == 1 and keys[0].endswith(b":max_tokens_limit")
            upstream = Settings().with_values({"upstream.base_url": base_url}).upstream
            shown = learned(ReceiptSettings(store=server.url), upstream, {})
            assert shown == "max_tokens_limit=8192 (model m, refused with 400)"
            elsewhere = replace(upstream, base_url="http://127.0.0.1:1/v1")
            assert learned(ReceiptSettings(store=server.url), elsewhere, {}) == "nothing yet"


def learned_keys(server: RedisServer) -> list[bytes]:
    client = redis.Redis.from_url(server.url)
    try:
        return list(client.scan_iter(match="streamfix:learned:*"))
    finally:
        client.close()


def test_the_learned_limit_is_what_the_upstream_said_not_a_guess() -> None:
    """The number sent is the refusal's, byte for byte in the resend (no margin, no estimate)."""
    fake = RefusingUpstream(deepseek_budget(7777))
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        chat("max_tokens")(proxy, 32000)
    assert orjson.loads(fake.received[1])["max_tokens"] == 7777
