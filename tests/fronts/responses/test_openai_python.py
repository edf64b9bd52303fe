"""openai-python's `client.responses` through the proxy's Responses front, in front of chat
upstreams that demand their receipts back (DeepSeek's `reasoning_content`, OpenRouter's
`reasoning_details`, Gemini's thought signatures): with the whole history every turn (as Codex
sends it, `store: false`) and with `previous_response_id`, streamed and not. Each flow runs
several tool steps over two questions; the fakes reject any follow-up that lacks what they
issued, so a flow that ends with the scripted texts proves the receipts travelled."""

from __future__ import annotations

import pytest

from tests.fronts.responses.responses_flows import run_flow
from tests.support.reasoning_flows import (
    FINAL_TEXTS,
    PROVIDERS,
    QUESTIONS,
    Provider,
    assert_receipts_returned,
    behind_proxy,
)
from tests.support.signature_flows import FINAL_TEXT, MODEL, gemini_behind_proxy

MODES = ("history", "previous")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "create"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_reasoning_receipts_travel(provider: Provider, mode: str, stream: bool) -> None:
    with behind_proxy(provider) as (fake, _, proxy):
        finals, responses = run_flow(proxy, provider.model, QUESTIONS, mode, stream)
        assert finals == FINAL_TEXTS
        assert fake.rejections == []
        assert len(fake.requests) == 5
        # The token restores the whole issued turn, text turns too (DeepSeek ignores it there):
        # to the chat core that is reasoning the client sent itself.
        assert assert_receipts_returned(fake, provider, client_sends=True) > 0
        reasoning = [i for r in responses for i in r["output"] if i["type"] == "reasoning"]
        assert reasoning and all(i["encrypted_content"].startswith("sf1.") for i in reasoning)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "create"])
@pytest.mark.parametrize("mode", MODES)
def test_gemini_signatures_travel(mode: str, stream: bool) -> None:
    with gemini_behind_proxy() as (fake, _, proxy):
        finals, _ = run_flow(proxy, MODEL, ("read the files",), mode, stream)
        assert finals == [FINAL_TEXT["three-step"]]
        assert len(fake.requests) == 3
