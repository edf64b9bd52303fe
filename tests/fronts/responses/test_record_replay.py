"""Responses exchanges record and replay like chat ones: a cassette holds the chat exchange
the front made upstream and the Responses events the client was sent; a replaying proxy (no
upstream at all) answers the same Responses flow from the cassettes with the same final texts,
and `streamfix replay` re-derives every cassette (the client's own request through the
Responses door again, answered from the cassette)."""

from __future__ import annotations

from pathlib import Path

import anyio

from proxy.replay_check import check_directory
from proxy.settings.schema import Settings
from proxy.upstream.cassettes import Cassette
from tests.fronts.responses.responses_flows import run_flow
from tests.support.proxies import running_proxy
from tests.support.reasoning_flows import DEEPSEEK, FINAL_TEXTS, QUESTIONS, behind_proxy


def test_a_recorded_responses_flow_replays_offline(tmp_path: Path) -> None:
    with behind_proxy(DEEPSEEK, {"recording.record_dir": str(tmp_path)}) as (fake, _, proxy):
        recorded, _ = run_flow(proxy, DEEPSEEK.model, QUESTIONS, "history", True)
        assert fake.rejections == []
    assert recorded == FINAL_TEXTS
    assert len(list(tmp_path.glob("*.json"))) == 5
    replay = {"recording.replay_dir": str(tmp_path), "upstream.profile": "deepseek"}
    with running_proxy("http://127.0.0.1:9/v1", **replay) as root:
        replayed, _ = run_flow(f"{root}/v1", DEEPSEEK.model, QUESTIONS, "history", True)
    assert replayed == FINAL_TEXTS
    # The cassettes keep what each client was sent: Responses events.
    cassettes = [Cassette.load(path) for path in sorted(tmp_path.glob("*.json"))]
    assert all(c.client_body.startswith(b"event: response.created") for c in cassettes)
    results = anyio.run(check_directory, tmp_path, Settings())
    assert [(r.ok, r.diff) for r in results] == [(True, [])] * 5
