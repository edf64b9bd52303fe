"""Responses and Messages exchanges recorded through a real proxy (`recording.record_dir`, what
`streamfix serve --record` sets) by the real client libraries, against fake upstreams whose
answers need repairs:

- the fake upstream's Gemini transcript: a call without an index, ended with `stop` (the
  headline bug), through each front, streamed and whole;
- the DeepSeek fake (`reasoning_content` it requires back on the follow-up): a turn streamed,
  then its follow-up whole, sending back what the client got (the Responses reasoning item's
  `encrypted_content`, the Messages thinking block's signature), which the translation turns
  back into the receipts.

Each cassette is copied to `NAME.json` in one directory, so explain's headers name the case.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anthropic

from tests.fronts.responses.responses_flows import TOOLS, client, one_response
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.reasoning_flows import DEEPSEEK, behind_proxy

GEMINI = "gemini_indexless_call_stop"
MESSAGES_TOOLS = [
    {"name": tool["name"], "description": tool["description"], "input_schema": tool["parameters"]}
    for tool in TOOLS
]
QUESTION = "read a.txt"

GEMINI_CASES = ("responses-stream", "responses-whole", "messages-stream", "messages-whole")
DEEPSEEK_CASES = (
    "responses-deepseek-turn",
    "responses-deepseek-follow-up",
    "messages-deepseek-turn",
    "messages-deepseek-follow-up",
)


def anthropic_client(proxy: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy, api_key="sk-ant-test-explain", max_retries=0)


def _message(sdk: anthropic.Anthropic, stream: bool, **request: Any) -> dict[str, Any]:
    request = {"max_tokens": 400, "tools": MESSAGES_TOOLS, **request}
    if not stream:
        return sdk.messages.create(**request).model_dump(exclude_none=True)
    with sdk.messages.stream(**request) as events:
        return events.get_final_message().model_dump(exclude_none=True)


def _gemini(proxy: str) -> None:
    responses = client(f"{proxy}/v1", "sk-test-explain")
    request = {"model": GEMINI, "input": QUESTION, "tools": TOOLS, "instructions": "be brief"}
    one_response(responses, True, **request)
    one_response(responses, False, **request)
    messages = anthropic_client(proxy)
    said = [{"role": "user", "content": QUESTION}]
    _message(messages, True, model=GEMINI, messages=said)
    _message(messages, False, model=GEMINI, messages=said)


def _deepseek(proxy: str) -> None:
    """Two requests per front: the first step of the turn, then the follow-up with the tool's
    result, which the fake refuses unless the reasoning it issued comes back."""
    model = DEEPSEEK.model
    responses = client(proxy, "sk-test-explain")
    asked: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    common = {"model": model, "tools": TOOLS, "store": False}
    common["include"] = ["reasoning.encrypted_content"]
    first = one_response(responses, True, input=asked, **common)
    [call] = [item for item in first["output"] if item["type"] == "function_call"]
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "A"}
    one_response(responses, False, input=[*asked, *first["output"], result], **common)

    messages = anthropic_client(proxy.removesuffix("/v1"))
    said: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    answer = _message(messages, True, model=model, messages=said)
    [use] = [block for block in answer["content"] if block["type"] == "tool_use"]
    back = [{"type": "tool_result", "tool_use_id": use["id"], "content": "A"}]
    follow_up = [*said, {"role": "assistant", "content": answer["content"]}]
    _message(messages, False, model=model, messages=[*follow_up, {"role": "user", "content": back}])


def _collect(source: Path, names: tuple[str, ...], target: Path) -> None:
    recorded = sorted(source.glob("*.json"))
    assert len(recorded) == len(names), [path.name for path in recorded]
    for path, name in zip(recorded, names, strict=True):
        shutil.copy(path, target / f"{name}.json")


def record_front_exchanges(directory: Path) -> Path:
    """Every case recorded; the directory of `NAME.json` cassettes."""
    cassettes = directory / "cassettes"
    cassettes.mkdir()
    gemini, deepseek = directory / "gemini", directory / "deepseek"
    with (
        running_fake_upstream() as (_, root),
        running_proxy(f"{root}/v1", **{"recording.record_dir": str(gemini)}) as proxy,
    ):
        _gemini(proxy)
    recording = {"recording.record_dir": str(deepseek)}
    with behind_proxy(DEEPSEEK, recording) as (fake, _, proxy):
        _deepseek(proxy)
        assert fake.rejections == []  # the follow-ups brought the reasoning back
    _collect(gemini, GEMINI_CASES, cassettes)
    _collect(deepseek, DEEPSEEK_CASES, cassettes)
    return cassettes
