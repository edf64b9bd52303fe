"""The Vercel AI SDK's Responses provider (`@ai-sdk/openai` `.responses()`, `streamText` with
tools and `stopWhen`) through the proxy's Responses front, in front of the DeepSeek, OpenRouter
and Gemini fakes: two questions, the SDK running its tools, the second question sent with the
first run's response messages. With `store: false` the SDK replays reasoning with its
`encrypted_content`; with `store` unset it sends `item_reference`s, which the front resolves
from its store. The fakes reject a follow-up lacking what they issued, so the scripted answers
prove the receipts travelled."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.clients.vercel import RESPONSES_SDK, run_vercel_agent
from tests.support.reasoning_flows import FINAL_TEXTS, PROVIDERS, QUESTIONS, Provider, behind_proxy
from tests.support.sdk_agent import TOOL_RESULTS, VERCEL_TOOLS
from tests.support.signature_flows import FINAL_TEXT, MODEL, gemini_behind_proxy

STORES = {"store-false": False, "store-unset": None}


def run_sdk(base_url: str, model: str, store: bool | None, **kwargs: Any) -> dict[str, Any]:
    result = run_vercel_agent(
        RESPONSES_SDK,
        base_url,
        model,
        VERCEL_TOOLS,
        execute=TOOL_RESULTS,
        max_steps=5,
        store=store,
        **kwargs,
    )
    assert result["errors"] == [], result["errors"]
    return result


@pytest.mark.parametrize("store", STORES.values(), ids=STORES.keys())
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_ai_sdk_responses_two_questions(
    provider: Provider, store: bool | None, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.INFO, "proxy.server.app"),
        behind_proxy(provider) as (
            fake,
            _,
            proxy,
        ),
    ):
        first = run_sdk(proxy, provider.model, store, prompt=QUESTIONS[0])
        history = [
            {"role": "user", "content": QUESTIONS[0]},
            *first["responseMessages"],
            {"role": "user", "content": QUESTIONS[1]},
        ]
        second = run_sdk(proxy, provider.model, store, messages=history)
        assert [first["text"], second["text"]] == FINAL_TEXTS
        assert fake.rejections == []
        assert len(fake.requests) == 5
    # With `store` unset the SDK replays its earlier items by reference (resolved from the
    # store); with `store: false`, whole.
    assert ("responses_item_reference" in caplog.text) is (store is None)


@pytest.mark.parametrize("store", STORES.values(), ids=STORES.keys())
def test_ai_sdk_responses_on_gemini(store: bool | None) -> None:
    with gemini_behind_proxy() as (fake, _, proxy):
        result = run_sdk(proxy, MODEL, store, prompt="read the files")
        assert result["text"] == FINAL_TEXT["three-step"]
        assert len(fake.requests) == 3
