"""Two proxy replicas sharing one Redis (`[receipts] store`): a Responses conversation whose
requests alternate between them, continued by `previous_response_id` and, statelessly, by
reasoning tokens, works as on one proxy: the transcript, the items and the turns are in Redis,
written before the terminal event."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fronts.responses.responses_flows import run_flow
from tests.support.proxies import running_proxy
from tests.support.reasoning_flows import DEEPSEEK, FINAL_TEXTS, QUESTIONS
from tests.support.reasoning_upstreams import running_deepseek_upstream
from tests.support.redis_server import RedisServer, started_redis_server


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    yield from started_redis_server()


@pytest.mark.parametrize("mode", ["previous", "history"])
def test_replicas_share_responses_through_redis(redis_server: RedisServer, mode: str) -> None:
    config = {"upstream.profile": "deepseek", "receipts.store": redis_server.url}
    with (
        running_deepseek_upstream() as (fake, root),
        running_proxy(f"{root}/v1", **config) as first,
        running_proxy(f"{root}/v1", **config) as second,
    ):
        finals, _ = run_flow([f"{first}/v1", f"{second}/v1"], DEEPSEEK.model, QUESTIONS, mode, True)
        assert finals == FINAL_TEXTS
        assert fake.rejections == []
