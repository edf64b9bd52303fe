"""Token counts through the Messages front, with the real Anthropic Python SDK and the proxy as
a real process (`python -m proxy serve`), in front of a chat upstream that counts its prompt by
a rule of its own and reports its cache as OpenRouter does
(tests/support/token_counting_upstream.py). The requests are Claude Code's size and make-up
(tests/support/claude_code_requests.py).

- `message_start` carries an estimate of the prompt, never 0: before any answer, a token per
  four bytes of the chat request as sent; after one, at the ratio that answer showed.
- The final usage carries what the upstream reported, split as Anthropic counts it (input
  less what the cache read and wrote, the two cache counts apart): streamed, the SDK's final
  message; whole, the message's `usage`. They add up to the upstream's prompt.
- `count_tokens` is the estimate before any exchange with that upstream and model
  (`x-streamfix-token-count: estimate`), and within 10 % of the upstream's own count of the
  request after one (`learned; …`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.support.claude_code_requests import claude_code_request
from tests.support.proxy_process import ServedProxy, serving
from tests.support.token_counting_upstream import (
    COMPLETION_TOKENS,
    TokenCountingUpstream,
    running_token_counting_upstream,
)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[TokenCountingUpstream, ServedProxy]]:
    with (
        running_token_counting_upstream() as (fake, base_url),
        serving("--upstream", base_url) as proxy,
    ):
        yield fake, proxy


def client(proxy: ServedProxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key="sk-count", max_retries=0)


def streamed(sdk: anthropic.Anthropic, body: dict[str, Any]) -> tuple[Any, Any]:
    """The `message_start` usage and the final message of one streamed request."""
    fields = {k: v for k, v in body.items() if k != "stream"}
    with sdk.messages.stream(**fields) as events:
        start = next(event for event in events if event.type == "message_start")
        return start.message.usage, events.get_final_message()


def anthropic_split(usage: dict[str, Any]) -> dict[str, int]:
    """The upstream's report as Anthropic counts it."""
    details = usage["prompt_tokens_details"]
    read, written = details["cached_tokens"], details["cache_write_tokens"]
    return {
        "input_tokens": usage["prompt_tokens"] - read - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": usage["completion_tokens"],
    }


def counted(usage: Any) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens or 0,
        "cache_read_input_tokens": usage.cache_read_input_tokens or 0,
        "output_tokens": usage.output_tokens,
    }


def within(estimate: int, actual: int, share: float) -> bool:
    return abs(estimate - actual) <= share * actual


def test_message_start_estimates_and_the_final_usage_is_the_upstreams(
    served: tuple[TokenCountingUpstream, ServedProxy],
) -> None:
    fake, proxy = served
    sdk = client(proxy)
    model = "counting-stream"
    start, final = streamed(sdk, claude_code_request(1, 3, model=model, stream=True))
    sent = fake.requests[-1].raw
    assert start.input_tokens == math.ceil(len(sent) / 4)  # nothing learned yet: the guess
    reported = fake.usages[-1]
    assert reported["prompt_tokens_details"]["cache_write_tokens"] > 0  # a first system prompt
    assert counted(final.usage) == anthropic_split(reported)
    assert sum(counted(final.usage).values()) == reported["total_tokens"]
    # The next request's estimate is at the ratio the first answer showed.
    start, final = streamed(sdk, claude_code_request(2, 6, model=model, stream=True))
    reported = fake.usages[-1]
    assert reported["prompt_tokens_details"]["cached_tokens"] > 0  # the system prompt again
    assert counted(final.usage) == anthropic_split(reported)
    assert within(start.input_tokens, reported["prompt_tokens"], 0.10)
    assert not within(math.ceil(len(fake.requests[-1].raw) / 4), reported["prompt_tokens"], 0.10)


def test_a_whole_answer_has_the_same_usage(
    served: tuple[TokenCountingUpstream, ServedProxy],
) -> None:
    fake, proxy = served
    body = claude_code_request(3, 2, model="counting-whole", stream=False, session=1)
    message = client(proxy).messages.create(**{k: v for k, v in body.items() if k != "stream"})
    assert fake.usages[-1]["prompt_tokens_details"]["cache_write_tokens"] > 0  # a new session
    assert counted(message.usage) == anthropic_split(fake.usages[-1])
    assert message.usage.output_tokens == COMPLETION_TOKENS


def test_count_tokens_is_the_estimate_then_within_ten_percent_after_one_exchange(
    served: tuple[TokenCountingUpstream, ServedProxy],
) -> None:
    fake, proxy = served
    sdk = client(proxy)
    model = "counting-count"
    asked = claude_code_request(5, 8, model=model, stream=False)
    fields = {k: v for k, v in asked.items() if k not in ("stream", "max_tokens")}
    before = sdk.messages.with_raw_response.count_tokens(**fields)
    assert before.headers["x-streamfix-token-count"] == "estimate"
    assert fake.requests == [] or all(r.body["model"] != model for r in fake.requests)
    # One exchange with that upstream and model (another request of the session).
    other = claude_code_request(4, 1, model=model, stream=False)
    sdk.messages.create(**{k: v for k, v in other.items() if k != "stream"})
    after = sdk.messages.with_raw_response.count_tokens(**fields)
    said = after.headers["x-streamfix-token-count"]
    assert said.startswith("learned; tokens_per_byte=") and said.endswith("; answers=1")
    # The upstream's own count of the request counted: sent to it.
    sdk.messages.create(**{k: v for k, v in asked.items() if k != "stream"})
    actual = fake.usages[-1]["prompt_tokens"]
    assert within(after.parse().input_tokens, actual, 0.10), (after.parse(), actual)
    assert not within(before.parse().input_tokens, actual, 0.10)  # the guess was not
