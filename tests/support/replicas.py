"""Replicas: several `python -m proxy serve` processes on one Redis, behind a client that sends
each request to the next one, as a load balancer without sticky sessions does.

`replica_config` writes the configuration every replica reads (the store, then `[[routes]]`
sending each family of model names to its fake upstream); `running_replicas` starts them with
the same environment (one STREAMFIX_RECEIPT_SECRET, so each reads the tokens the others mint).
`round_robin_chat` runs the OpenAI SDK's tool loop with each request to the next replica, the
assistant messages kept as apps keep them (no reasoning, no provider metadata);
`RoundRobinOpenWebUI` does the same with Open WebUI's loop.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.support.metrics import metric
from tests.support.open_webui import OpenWebUIClient
from tests.support.proxy_process import ServedProxy
from tests.support.reasoning_flows import QUESTIONS, REASONING_FIELDS
from tests.support.sdk_agent import ask

RECEIPT_SECRET = "replicas-share-this-secret-7d2c"


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return str(value)


def replica_config(
    path: Path, receipts: dict[str, Any], routes: Sequence[dict[str, Any]] = ()
) -> Path:
    """A config file: `[receipts]` with `receipts`, then one `[[routes]]` table each."""
    lines = ["[receipts]", *(f"{k} = {toml_value(v)}" for k, v in receipts.items())]
    for route in routes:
        lines += ["", "[[routes]]", *(f"{k} = {toml_value(v)}" for k, v in route.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def running_replicas(
    config: Path, count: int = 2, env: dict[str, str] | None = None
) -> Iterator[list[ServedProxy]]:
    environment = {"STREAMFIX_RECEIPT_SECRET": RECEIPT_SECRET, **(env or {})}
    with ExitStack() as stack:
        replicas = []
        for _ in range(count):
            replica = ServedProxy(["--config", str(config)], environment)
            stack.callback(replica.stop)
            replicas.append(replica)
        for replica in replicas:  # started together, then waited for: half the start-up time
            replica.wait_healthy()
        yield replicas


def scraped(proxy_url: str, name: str, **labels: str) -> float:
    """One sample of the replica's /metrics (0 when it has none yet)."""
    return metric(httpx.get(f"{proxy_url}/metrics", timeout=10).text, name, **labels)


class RoundRobinOpenWebUI(OpenWebUIClient):
    """Open WebUI behind a load balancer: each round of its tool loop goes to the next
    replica."""

    def __init__(self, base_urls: Sequence[str], **options: Any) -> None:
        super().__init__(base_urls[0], **options)
        self._next = itertools.cycle(base_urls)
        self.sent_to: list[str] = []

    def _complete(
        self, http: httpx.Client, body: dict[str, Any]
    ) -> tuple[str, list[dict[str, Any]]] | httpx.Response:
        self.base_url = next(self._next)
        self.sent_to.append(self.base_url)
        return super()._complete(http, body)


def forget_receipts(message: dict[str, Any]) -> None:
    """What an app keeps of an assistant message: no reasoning, no provider metadata."""
    for name in (*REASONING_FIELDS, "extra_content"):
        message.pop(name, None)
    for call in message.get("tool_calls") or ():
        call.pop("extra_content", None)


def round_robin_chat(
    urls: list[str],
    model: str,
    mode: str,
    key: str,
    between: Callable[[int], None] = lambda sent: None,
) -> list[str]:
    """The SDK's tool loop over QUESTIONS, each request to the next replica; the final texts.
    `between(n)` runs after the n-th request (a failover, an outage)."""
    clients = [openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0) for url in urls]
    messages: list[dict[str, Any]] = []
    finals, sent = [], 0
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        for _ in range(5):
            assistant = ask(clients[sent % len(clients)], model, messages, mode, forget_receipts)
            sent += 1
            between(sent)
            messages.append(assistant)
            if not assistant.get("tool_calls"):
                finals.append(str(assistant.get("content")))
                break
            messages += [
                {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"ok": 1})}
                for call in assistant["tool_calls"]
            ]
    assert sent >= 4, sent  # follow-ups went both ways
    return finals
