"""Receipts follow the evidence (the `generic` profile), end to end: the real proxy on 127.0.0.1, in
front of upstreams whose host says nothing, with no profile configured, and real clients.

- A Vertex-shaped upstream (signatures under `extra_content.vertex`) serving a model whose name
  has no vendor word: before, its signatures were dropped and every second tool round got 400.
- The same upstream, with a client that sends the signature back itself (as the OpenAI Node
  SDK's stream helper does): before, the proxy stripped it as foreign metadata, and got 400.
- An OpenRouter-shaped upstream serving `google/gemini-…`: before, the model name gave it
  Gemini's rules, so its reasoning_details were not kept (400) and Google's placeholder went
  into requests bound for a non-Google gateway.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.support.gemini_upstream import THREE_STEPS, running_gemini_upstream, signature_of
from tests.support.proxies import running_proxy

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
]


def run_agent(base_url: str, model: str, *, keep_receipts: bool) -> list[int]:
    """The three-step tool loop with the OpenAI SDK (non-streamed): statuses of each round.
    `keep_receipts`: send each assistant message back as received (extra_content included), as
    the Node SDK's helper does; otherwise rebuild it without, as most Python code does."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-evidence", max_retries=0, timeout=30)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read a.txt"}]
    statuses = []
    for _ in range(len(THREE_STEPS)):
        try:
            completion = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        except openai.APIStatusError as error:
            statuses.append(error.status_code)
            break
        statuses.append(200)
        message = completion.choices[0].message.model_dump(exclude_none=True)
        calls = message.get("tool_calls") or []
        if not calls:
            break
        if not keep_receipts:
            message["tool_calls"] = [
                {k: v for k, v in call.items() if k != "extra_content"} for call in calls
            ]
        messages.append(message)
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
    return statuses


@pytest.mark.parametrize("keep_receipts", [False, True], ids=["client-drops", "client-keeps"])
def test_a_vertex_shaped_upstream_on_loopback_gets_its_signatures_back(keep_receipts) -> None:
    with (
        running_gemini_upstream(THREE_STEPS, namespace="vertex") as (fake, root),
        running_proxy(f"{root}/v1beta/openai") as proxy,
    ):
        statuses = run_agent(f"{proxy}/v1", "my-model", keep_receipts=keep_receipts)
        metrics = httpx.get(f"{proxy}/metrics", timeout=10).text
    assert statuses == [200, 200, 200], statuses
    assert fake.rejections == 0
    # What went upstream carried the Vertex-shaped signature, never Google's placeholder.
    for request in fake.requests[1:]:
        for message in request.json["messages"]:
            for call in message.get("tool_calls") or []:
                assert signature_of(call) != "skip_thought_signature_validator"
    assert 'kind="signatures_placeholders"' not in metrics


def test_without_the_proxy_the_dropping_client_gets_the_400() -> None:
    # The fake enforces the rule: a second round without the signature is refused.
    with running_gemini_upstream(THREE_STEPS, namespace="vertex") as (fake, root):
        statuses = run_agent(f"{root}/v1beta/openai", "my-model", keep_receipts=False)
    assert statuses == [200, 400]
    assert fake.rejections == 1
