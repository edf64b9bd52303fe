"""The AI SDK's Anthropic provider (`@ai-sdk/anthropic` 3.0.140 with `ai` 6.0.326) through the
Messages front: `streamText` with tools and `stopWhen`, two user turns, the second carrying the
first's response messages as the SDK kept them. The fakes refuse a follow-up without the
receipts (DeepSeek's reasoning_content, OpenRouter's reasoning_details): the AI SDK drops an
unsigned thinking block, so this also proves the thinking blocks come signed."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.clients.messages_node import HERE, ensure_installed
from tests.clients.test_messages_anthropic_sdk import QUESTIONS, upstream
from tests.support import nodejs
from tests.support.gemini_upstream import TWO_STEPS
from tests.support.reasoning_upstreams import TWO_TURNS, TextStep


@pytest.mark.parametrize("kind", ["gemini", "deepseek", "openrouter"])
def test_stream_text_two_turns_with_tools(kind: str) -> None:
    ensure_installed()
    with upstream(kind) as (fake, proxy, model):
        config = {
            "baseURL": f"{proxy}/v1",
            "apiKey": "k-ai",
            "model": model,
            "questions": QUESTIONS,
        }
        done = subprocess.run(
            [nodejs.node(), "ai_sdk_driver.mjs", json.dumps(config)],
            cwd=HERE,
            env=nodejs.environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["errors"] == []
        if kind == "gemini":  # signatures on the calls, no reasoning text
            assert fake.rejections == 0
            expected = [s.text for s in TWO_STEPS if isinstance(s, TextStep)] * 2
        else:
            assert fake.rejections == []
            expected = [next(s.text for s in turn if isinstance(s, TextStep)) for turn in TWO_TURNS]
            assert all(count > 0 for count in result["reasoning"])
        assert result["texts"] == expected
        assert all(r.headers.get("authorization") == "Bearer k-ai" for r in fake.requests)
