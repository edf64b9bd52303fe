"""Thought signatures through the real proxy in front of the Gemini fake, beyond one client's
flow: tenants never see each other's signatures, no Google metadata reaches other upstreams,
and a current-turn step the proxy never saw gets Google's placeholder (or, with
`on_missing = "leave"`, Gemini's 400 is relayed).
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.fake_upstream import running_fake_upstream
from tests.support.gemini_upstream import (
    DUMMY_SIGNATURE,
    THREE_STEPS,
    missing_signature_message,
    signature_of,
    tool_calls_of,
)
from tests.support.openai_errors import as_chat_clients_get
from tests.support.proxies import running_proxy
from tests.support.sdk_agent import OPENAI_TOOLS, final_message, history_call
from tests.support.signature_flows import (
    MODEL,
    gemini_behind_proxy,
    post_chat,
    without_extra_content,
)


def steps_of(body: dict[str, Any]) -> list[tuple[int, list[dict[str, Any]]]]:
    """(message index, calls) of every assistant message with tool calls."""
    return [(i, calls) for i, m in enumerate(body["messages"]) if (calls := tool_calls_of(m))]


@pytest.mark.parametrize(
    "config",
    [{}, {"signatures.tenant_header": "x-tenant"}],
    ids=["credential", "tenant-header"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_tenants_never_see_each_others_signatures(config: dict[str, Any], stream: bool) -> None:
    """Two clients get the same call id from the upstream; each follow-up must carry its own
    client's signature. The requests interleave, so a store keyed by call id alone would hand
    the second client's signature to the first."""

    def ids(step: int, position: int) -> str:
        return f"shared-{step}-{position}"

    by_header = bool(config)
    with gemini_behind_proxy(THREE_STEPS, config, fixed_ids=ids) as (fake, _, proxy):
        clients, keys = {}, {}
        for name in ("one", "two"):
            # Same credential when a tenant header names the tenant, different keys otherwise.
            key = keys[name] = "sk-shared" if by_header else f"sk-{name}"
            headers = {"x-tenant": name} if by_header else {}
            clients[name] = openai.OpenAI(
                base_url=proxy, api_key=key, max_retries=0, timeout=30, default_headers=headers
            )
        histories = {name: [{"role": "user", "content": "read a.txt"}] for name in clients}
        issued: dict[str, str] = {}
        for name, client in clients.items():
            kwargs = {"model": MODEL, "messages": histories[name], "tools": OPENAI_TOOLS}
            (call,) = final_message(client, stream, **kwargs).tool_calls
            assert call.id == "shared-0-0"
            latest = fake.issued_log[-1]
            assert (latest.call_id, latest.tenant) == ("shared-0-0", f"Bearer {keys[name]}")
            issued[name] = latest.signature
            histories[name] += [
                {"role": "assistant", "tool_calls": [history_call(call)]},
                {"role": "tool", "tool_call_id": call.id, "content": "hello"},
            ]
        assert issued["one"] != issued["two"]
        follow_ups = {}
        for name, client in clients.items():
            client.chat.completions.create(
                model=MODEL, messages=histories[name], tools=OPENAI_TOOLS
            )
            follow_ups[name] = fake.requests[-1].json
        for name, body in follow_ups.items():
            (_, calls), *_ = steps_of(body)
            assert signature_of(calls[0]) == issued[name], (name, json.dumps(body))
        assert fake.rejections == 0


# ── no Google metadata to other upstreams ────────────────────────────────────

SIGNED_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Paris and Tokyo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "k2j9xq1m",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                "extra_content": {"google": {"thought_signature": "CiQBcsjafGxAVt0yQ3lxo5ZR"}},
            },
            {
                "id": "p8f3zt6c",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Tokyo"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "k2j9xq1m", "content": "18C"},
    {"role": "tool", "tool_call_id": "p8f3zt6c", "content": "22C"},
    {
        "role": "assistant",
        "content": "Paris 18C, Tokyo 22C.",
        "extra_content": {"google": {"thought_signature": "EjQKMgG+Pvb7s6anNtqT"}},
    },
    {"role": "user", "content": "and in Rome?"},
]


def _google_metadata(value: Any, path: str = "") -> list[str]:
    """Paths of every `extra_content.google` (or `extra_content.vertex`) in `value`."""
    found = []
    if isinstance(value, dict):
        extra = value.get("extra_content")
        if isinstance(extra, dict):
            found += [f"{path}.extra_content.{k}" for k in ("google", "vertex") if k in extra]
        for key, item in value.items():
            found += _google_metadata(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _google_metadata(item, f"{path}[{i}]")
    return found


@pytest.mark.parametrize(
    ("profile", "model", "stream"),
    [
        ("openai", "openai_indexed_parallel", True),
        ("openai", "openai_indexed_fragmented", False),
        # No profile given: a loopback host and a model without "gemini" is not Google.
        ("auto", "openai_indexed_parallel", True),
    ],
)
def test_no_google_metadata_reaches_other_upstreams(profile: str, model: str, stream: bool) -> None:
    assert _google_metadata(SIGNED_HISTORY)  # the history does carry some
    with (
        running_fake_upstream() as (fake, root),
        running_proxy(f"{root}/v1", **{"upstream.profile": profile}) as proxy,
    ):
        body = {"model": model, "stream": stream, "messages": SIGNED_HISTORY}
        response = post_chat(f"{proxy}/v1", body)
        assert response.status_code == 200, response.text
        (received,) = [r.json for r in fake.requests if r.path.endswith("/chat/completions")]
        assert _google_metadata(received) == [], json.dumps(received)
        # Everything else arrives as sent.
        assert [m["role"] for m in received["messages"]] == [m["role"] for m in SIGNED_HISTORY]
        calls = received["messages"][1]["tool_calls"]
        assert [(c["id"], c["function"]) for c in calls] == [
            (c["id"], c["function"]) for c in SIGNED_HISTORY[1]["tool_calls"]
        ]
        assert received["messages"][4]["content"] == "Paris 18C, Tokyo 22C."


# ── history the proxy never saw ──────────────────────────────────────────────


def _call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


FOREIGN_HISTORY: list[dict[str, Any]] = [
    # An older turn, unsigned: Gemini does not validate it, the proxy must leave it alone.
    {"role": "user", "content": "what is in old.txt?"},
    {"role": "assistant", "content": None, "tool_calls": [_call("old-1", "read_file")]},
    {"role": "tool", "tool_call_id": "old-1", "content": "old"},
    {"role": "assistant", "content": "It says old."},
    # The current turn: two steps from elsewhere (another model, another proxy, a restart).
    {"role": "user", "content": "now read a.txt and list the directory"},
    {"role": "assistant", "content": None, "tool_calls": [_call("foreign-1", "read_file")]},
    {"role": "tool", "tool_call_id": "foreign-1", "content": "hello"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("foreign-2", "read_file"), _call("foreign-3", "list_dir")],
    },
    {"role": "tool", "tool_call_id": "foreign-2", "content": "hello"},
    {"role": "tool", "tool_call_id": "foreign-3", "content": "[]"},
]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_unseen_current_turn_step_gets_the_placeholder(stream: bool) -> None:
    with gemini_behind_proxy(THREE_STEPS) as (fake, _, proxy):
        body = {"model": MODEL, "stream": stream, "messages": FOREIGN_HISTORY}
        response = post_chat(proxy, body)
        assert response.status_code == 200, response.text
        assert fake.rejections == 0
        received = fake.requests[-1].json["messages"]
        assert len(received) == len(FOREIGN_HISTORY)
        # The older turn arrives exactly as sent.
        assert received[:5] == FOREIGN_HISTORY[:5]
        # Each current-turn step: the dummy on its first call, nothing on the others.
        assert signature_of(received[5]["tool_calls"][0]) == DUMMY_SIGNATURE
        first, second = received[7]["tool_calls"]
        assert signature_of(first) == DUMMY_SIGNATURE
        assert "extra_content" not in second
        for i in (5, 7):
            for j, call in enumerate(received[i]["tool_calls"]):
                assert without_extra_content(call) == FOREIGN_HISTORY[i]["tool_calls"][j]
        assert received[6:7] + received[8:] == FOREIGN_HISTORY[6:7] + FOREIGN_HISTORY[8:]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_on_missing_leave_relays_geminis_400(stream: bool) -> None:
    config = {"signatures.on_missing": "leave"}
    with gemini_behind_proxy(THREE_STEPS, config) as (fake, _, proxy):
        body = {"model": MODEL, "stream": stream, "messages": FOREIGN_HISTORY}
        response = post_chat(proxy, body)
        assert fake.rejections == 1
        status, sent = fake.responses[-1]
        assert status == 400 and response.status_code == 400
        assert response.content == as_chat_clients_get(sent)  # the array around it taken away
        assert response.headers["content-type"].startswith("application/json")
        message = response.json()["error"]["message"]
        assert message == missing_signature_message("read_file", 6)
        received = fake.requests[-1].json["messages"]
        assert _google_metadata(received) == []
