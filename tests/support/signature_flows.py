"""Thought-signature flows through the proxy: the Gemini fake (tests/support/gemini_upstream.py)
behind the real proxy under uvicorn, the model, tools and scripts of the flows, and small
request helpers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.support.gemini_upstream import (
    THREE_STEPS,
    TWO_STEPS,
    GeminiUpstream,
    Step,
    TextStep,
    running_gemini_upstream,
)
from tests.support.proxies import running_proxy

MODEL = "gemini-3-flash-preview"
FINAL_TEXT = {
    "three-step": next(s.text for s in THREE_STEPS if isinstance(s, TextStep)),
    "two-turn": next(s.text for s in TWO_STEPS if isinstance(s, TextStep)),
}
SCRIPTS: dict[str, list[Step]] = {"three-step": THREE_STEPS, "two-turn": TWO_STEPS}
# The fake stands in for Google's endpoint, whose host picks the gemini profile; on 127.0.0.1
# the profile is configured, as a user's tunnel to Google would be.
GOOGLE = {"upstream.profile": "gemini"}


@contextmanager
def gemini_behind_proxy(
    script: list[Step] | None = None, proxy_config: dict[str, Any] | None = None, **knobs: Any
) -> Iterator[tuple[GeminiUpstream, str, str]]:
    """(fake, the fake's base URL, the proxy's base URL), both `…/v1`-style OpenAI base URLs."""
    with (
        running_gemini_upstream(script, **knobs) as (fake, root),
        running_proxy(f"{root}/v1beta/openai", **{**GOOGLE, **(proxy_config or {})}) as proxy,
    ):
        yield fake, f"{root}/v1beta/openai", f"{proxy}/v1"


def post_chat(base_url: str, body: dict[str, Any], key: str = "k") -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{base_url}/chat/completions", json=body, headers=headers, timeout=30)


def without_extra_content(call: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in call.items() if k != "extra_content"}
