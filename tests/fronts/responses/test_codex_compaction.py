"""Codex CLI compacting through the proxy, offline: a provider that declares
`capabilities.remote_compaction = "v2"` (as OpenAI's and Azure's do) and a small
`model_auto_compact_token_limit`, so the usage the fake reports after the first tool step
makes Codex compact before its follow-up. It sends a `compaction_trigger` turn, takes the one
`compaction` item back, and continues the same turn from it: the upstream's next request holds
the summary where the old tool turn was, and the session completes."""

from __future__ import annotations

from proxy.fronts.responses.compaction import SUMMARY_INSTRUCTION, SUMMARY_PREFIX
from tests.fronts.responses.codex import run_codex
from tests.support.reasoning_flows import PROVIDERS, behind_proxy
from tests.support.reasoning_upstreams import TextStep, tool_step

SUMMARY = "The echo command ran and printed streamfix-42."
STEPS = [tool_step(("exec_command", {"cmd": "echo streamfix-$((6*7))"})), TextStep("unused")]
# Turns by user messages: Codex's environment context and the prompt make the first turn 1;
# the summarising instruction (and, after it, the summary) make turn 2.
SCRIPT = [STEPS, STEPS, [TextStep(SUMMARY)]]
COMPACTS = (
    'model_providers.sf.capabilities={remote_compaction="v2"}',
    "model_auto_compact_token_limit=200",
)


def test_codex_compacts_mid_turn_and_continues() -> None:
    provider = PROVIDERS["deepseek"]
    with behind_proxy(provider, script=SCRIPT) as (fake, _, proxy):
        events = run_codex(proxy, provider.model, "run the echo command", config=COMPACTS)
        assert fake.rejections == []
        assert [e["type"] for e in events if e["type"].startswith("turn.")] == [
            "turn.started",
            "turn.completed",
        ], events
        asked = [r.json for r in fake.requests]
        assert len(asked) == 3
        compaction = asked[1]
        assert compaction["messages"][-1] == {"role": "user", "content": SUMMARY_INSTRUCTION}
        assert "tools" not in compaction
        assert any(m["role"] == "tool" for m in compaction["messages"])  # the old turn
        follow_up = asked[2]["messages"]
        assert {"role": "user", "content": SUMMARY_PREFIX + SUMMARY} in follow_up
        assert all(m["role"] != "tool" and not m.get("tool_calls") for m in follow_up)
        assert "tools" in asked[2]
