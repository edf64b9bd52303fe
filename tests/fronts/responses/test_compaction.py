"""Codex's remote compaction through the Responses door, with openai-python's client: a turn
whose `input` ends with `{"type": "compaction_trigger"}` is answered with exactly one
`compaction` item (its `encrypted_content` a receipt token naming the summary the upstream
wrote), and a later request carrying that item sends the upstream the summary in place of the
old turns. Behind the DeepSeek and OpenRouter fakes, which refuse any tool-call turn whose
receipts do not come back, so the turns after the compaction prove theirs still travel."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.fronts.responses.compaction import SUMMARY_INSTRUCTION, SUMMARY_PREFIX
from tests.fronts.responses.responses_flows import TOOLS, client, one_response
from tests.support.reasoning_flows import PROVIDERS, Provider, behind_proxy
from tests.support.reasoning_upstreams import TWO_TURNS, TextStep

SUMMARY = "The user had a.txt and b.txt read and the directory listed; all done."
SCRIPT = [list(TWO_TURNS[0]), [TextStep(SUMMARY)], list(TWO_TURNS[1])]
QUESTIONS = ("read a.txt and b.txt, list the directory", "now read c.txt")
TRIGGER = {"type": "compaction_trigger"}


def _turn(sdk: Any, model: str, history: list[dict[str, Any]], stream: bool) -> str:
    """One question through its tool steps, Codex's way (history and output echoed)."""
    for _ in range(6):
        response = one_response(
            sdk,
            stream,
            model=model,
            tools=TOOLS,
            input=list(history),
            store=False,
            include=["reasoning.encrypted_content"],
        )
        history += response["output"]
        calls = [item for item in response["output"] if item["type"] == "function_call"]
        if not calls:
            return "".join(
                part["text"]
                for item in response["output"]
                if item["type"] == "message"
                for part in item["content"]
            )
        history += [
            {"type": "function_call_output", "call_id": c["call_id"], "output": "ok"} for c in calls
        ]
    raise AssertionError("the turn did not end")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "create"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_compaction_then_follow_up(provider: Provider, stream: bool) -> None:
    with behind_proxy(provider, script=SCRIPT) as (fake, _, proxy):
        sdk = client(proxy)
        history: list[dict[str, Any]] = [{"role": "user", "content": QUESTIONS[0]}]
        assert _turn(sdk, provider.model, history, stream) == TWO_TURNS[0][-1].text  # type: ignore[union-attr]
        before = len(fake.requests)

        compacted = one_response(
            sdk,
            stream,
            model=provider.model,
            tools=TOOLS,
            instructions="You are a coding agent.",
            input=[*history, TRIGGER],
            store=False,
        )
        assert compacted["status"] == "completed"
        items = compacted["output"]
        assert [item["type"] for item in items] == ["compaction"]
        token = items[0]["encrypted_content"]
        assert token.startswith("sf1.") and SUMMARY not in token
        asked = fake.requests[before].json
        assert "tools" not in asked
        assert asked["messages"][0] == {"role": "system", "content": "You are a coding agent."}
        assert asked["messages"][-1] == {"role": "user", "content": SUMMARY_INSTRUCTION}
        assert any(m.get("tool_calls") for m in asked["messages"])  # the conversation went too

        # Codex's compacted history: the user messages it keeps, then the item as it came.
        after: list[dict[str, Any]] = [
            {"role": "user", "content": QUESTIONS[0]},
            items[0],
            {"role": "user", "content": QUESTIONS[1]},
        ]
        start = len(fake.requests)
        assert _turn(sdk, provider.model, after, stream) == TWO_TURNS[1][-1].text  # type: ignore[union-attr]
        assert fake.rejections == []
        for request in fake.requests[start:]:
            messages = request.json["messages"]
            assert messages[1] == {"role": "user", "content": SUMMARY_PREFIX + SUMMARY}
            # the old turns are gone: only what came after the compaction has calls
            assert sum(1 for m in messages if m.get("tool_calls")) == sum(
                1 for m in messages[3:] if m.get("tool_calls")
            )
            assert all(m.get("role") != "tool" for m in messages[:3])
        # the turn after the compaction had a tool step whose receipts came back
        assert any(
            m.get("tool_calls") and m.get(provider.field)
            for r in fake.requests[start:]
            for m in r.json["messages"]
        )


def test_foreign_compaction_item_is_refused() -> None:
    provider = PROVIDERS["deepseek"]
    with behind_proxy(provider, script=SCRIPT) as (fake, _, proxy):
        sdk = client(proxy)
        history: list[dict[str, Any]] = [{"role": "user", "content": QUESTIONS[0]}]
        _turn(sdk, provider.model, history, False)
        compacted = one_response(
            sdk, False, model=provider.model, input=[*history, TRIGGER], store=False
        )
        item = compacted["output"][0]
        sent = len(fake.requests)
        for key, bad in (
            ("sk-other", item),  # another tenant's token
            ("sk-test", {**item, "encrypted_content": item["encrypted_content"][:-2] + "xx"}),
            ("sk-test", {"type": "compaction", "encrypted_content": "gAAAAABopaque"}),
        ):
            body = {"model": provider.model, "input": [bad, {"role": "user", "content": "go"}]}
            answer = httpx.post(
                f"{proxy}/responses",
                json=body,
                headers={"authorization": f"Bearer {key}"},
                timeout=30,
            )
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["param"] == "input[0]" and error["code"] == "invalid_value"
            assert "compaction item" in error["message"]
        assert len(fake.requests) == sent  # refused before anything went upstream


@pytest.mark.parametrize(
    "input_",
    [
        [TRIGGER, {"role": "user", "content": "hi"}],
        [{"role": "user", "content": "hi"}, TRIGGER, TRIGGER],
    ],
    ids=["first", "twice"],
)
def test_misplaced_trigger_is_refused(input_: list[dict[str, Any]]) -> None:
    provider = PROVIDERS["deepseek"]
    with behind_proxy(provider) as (fake, _, proxy):
        answer = httpx.post(
            f"{proxy}/responses",
            json={"model": provider.model, "input": input_},
            headers={"authorization": "Bearer sk-test"},
            timeout=30,
        )
        assert answer.status_code == 400
        assert "compaction_trigger" in answer.json()["error"]["message"]
        assert fake.requests == []


def test_compact_endpoint_is_not_offered() -> None:
    provider = PROVIDERS["deepseek"]
    with behind_proxy(provider) as (_, _, proxy):
        answer = httpx.post(
            f"{proxy}/responses/compact",
            json={"model": provider.model, "input": []},
            headers={"authorization": "Bearer sk-test"},
            timeout=30,
        )
        assert answer.status_code == 501


def test_the_compaction_and_its_restoring_are_counted() -> None:
    provider = PROVIDERS["deepseek"]
    headers = {"authorization": "Bearer sk-test"}
    with behind_proxy(provider, script=[[TextStep(SUMMARY)]]) as (fake, _, proxy):
        history = [{"role": "user", "content": "hello"}]
        compacted = httpx.post(
            f"{proxy}/responses",
            json={"model": provider.model, "input": [*history, TRIGGER], "store": False},
            headers=headers,
            timeout=30,
        )
        assert compacted.status_code == 200, compacted.text
        assert "responses_compaction_summarised:1" in compacted.headers["x-streamfix-repairs"]
        item = compacted.json()["output"][0]
        follow_up = httpx.post(
            f"{proxy}/responses",
            json={"model": provider.model, "input": [*history, item], "store": False},
            headers=headers,
            timeout=30,
        )
        assert follow_up.status_code == 200, follow_up.text
        assert "responses_compaction_restored:1" in follow_up.headers["x-streamfix-repairs"]
        assert fake.requests[-1].json["messages"][-1]["content"] == SUMMARY_PREFIX + SUMMARY
