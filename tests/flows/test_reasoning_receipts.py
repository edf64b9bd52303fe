"""Reasoning receipts through the real proxy, in front of the DeepSeek and OpenRouter fakes:
reasoning reaches the client unchanged (streamed pieces and non-streamed fields) with the
tool-call rules unaffected; a client's own value is never replaced; a DeepSeek miss is left
alone, relayed and counted; receipts stay with their tenant and their upstream (one proxy
routing to DeepSeek, OpenRouter and a plain upstream).

The DeepSeek fake's base URL is on 127.0.0.1, so the proxy takes the `deepseek` profile from
the model name; for OpenRouter the host says nothing, so `upstream.profile = "openrouter"`.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.reasoning_flows import (
    DEEPSEEK,
    FINAL_TEXTS,
    OPENROUTER,
    PROVIDERS,
    Provider,
    assert_receipts_returned,
    behind_proxy,
    openai_client,
    post_chat,
    rejection_reasons,
    repairs_total,
    run_openai_flow,
    tool_call,
    tool_results_for,
    wait_for_repairs_total,
    without_reasoning,
)
from tests.support.reasoning_upstreams import (
    Rejection,
    running_deepseek_upstream,
    running_openrouter_upstream,
)
from tests.support.sdk_agent import OPENAI_TOOLS, final_message, history_call


def _raw_stream(client: openai.OpenAI, model: str) -> tuple[list[Any], list[Any]]:
    """(per chunk: the choice's delta, per chunk: the finish reason) of one streamed request."""
    deltas, finishes = [], []
    kwargs = {
        "model": model,
        "messages": [{"role": "user", "content": "go"}],
        "tools": OPENAI_TOOLS,
    }
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            deltas.append(choice.delta)
            finishes.append(choice.finish_reason)
    return deltas, finishes


@pytest.mark.parametrize("emit", ["atomic", "incremental"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_reasoning_streams_through_unchanged(provider: Provider, emit: str) -> None:
    config = {"tool_calls.emit": emit}
    with behind_proxy(provider, config, min_pieces=5) as (fake, _, proxy):
        deltas, finishes = _raw_stream(openai_client(proxy), provider.model)
        (issued,) = fake.issued_log
        extras = [d.model_extra or {} for d in deltas]
        if provider is DEEPSEEK:
            pieces = [
                e["reasoning_content"] for e in extras if e.get("reasoning_content") is not None
            ]
            assert pieces == list(issued.pieces)
            assert "".join(pieces) == issued.receipt
        else:
            pieces = [e["reasoning_details"] for e in extras if "reasoning_details" in e]
            assert pieces == list(issued.pieces)
            assert "".join(e.get("reasoning") or "" for e in extras) == issued.reasoning
        # Tool calls: the core rules, unaffected by reasoning on the same deltas.
        entries = [tc for d in deltas for tc in d.tool_calls or []]
        (call_id,) = issued.call_ids
        opening = entries[0]
        assert (opening.index, opening.id, opening.type, opening.function.name) == (
            0,
            call_id,
            "function",
            "read_file",
        )
        if emit == "atomic":
            assert len(entries) == 1
        assert all(e.index == 0 and e.id is None for e in entries[1:])
        arguments = "".join(e.function.arguments or "" for e in entries)
        assert json.loads(arguments) == {"path": "a.txt"}
        assert [f for f in finishes if f] == ["tool_calls"]
        assert [d.role for d in deltas if d.role] == ["assistant"]


@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_non_streamed_reasoning_passes_through(provider: Provider) -> None:
    with behind_proxy(provider) as (fake, _, proxy):
        body = {"model": provider.model, "messages": [{"role": "user", "content": "go"}]}
        via_proxy = post_chat(proxy, body).json()
        (issued,) = fake.issued_log
        message = via_proxy["choices"][0]["message"]
        assert message[provider.field] == issued.receipt
        _, sent = fake.responses[-1]
        assert message == json.loads(sent)["choices"][0]["message"]


# ── a client's own reasoning is never overridden ─────────────────────────────


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_altered_client_reasoning_goes_upstream_as_issued(provider: Provider, stream: bool) -> None:
    """The value the upstream issued for this very turn wins over a copy the
    client altered (OpenAI's SDK accumulator concatenates reasoning_details' strings)."""
    with behind_proxy(provider) as (fake, _, proxy):
        user = {"role": "user", "content": "read a.txt"}
        first = post_chat(proxy, {"model": provider.model, "messages": [user]})
        message = first.json()["choices"][0]["message"]
        issued = message[provider.field]
        if provider is DEEPSEEK:
            own: Any = "The client's own reasoning."
        else:
            own = [{**issued[1], "data": "Y2xpZW50"}, issued[0]]
        sent = {**without_reasoning(message), provider.field: own}
        history = [user, sent, *tool_results_for(message)]
        body = {"model": provider.model, "stream": stream, "messages": history}
        response = post_chat(proxy, body)
        # The upstream got what it issued, not the client's altered copy, and accepted it.
        received = fake.requests[-1].json["messages"]
        assert received[1][provider.field] == issued != own
        assert rejection_reasons(fake) == []
        assert response.status_code == 200
        assert (
            wait_for_repairs_total(proxy.removesuffix("/v1"), f"{provider.field}_restored", 1) == 1
        )
        # The stored receipt is still there for a client that sends nothing.
        history[1] = without_reasoning(message)
        assert post_chat(proxy, {**body, "messages": history}).status_code == 200
        assert fake.requests[-1].json["messages"][1][provider.field] == issued


# ── misses ───────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_deepseek_miss_is_left_unchanged_and_counted(stream: bool) -> None:
    with (
        running_deepseek_upstream() as (fake, root),
        running_proxy(f"{root}/v1", **DEEPSEEK.proxy_config) as proxy,
    ):
        user = {"role": "user", "content": "read a.txt"}
        known = post_chat(f"{proxy}/v1", {"model": DEEPSEEK.model, "messages": [user]})
        message = known.json()["choices"][0]["message"]
        foreign = {
            "role": "assistant",
            "content": "",
            "tool_calls": [tool_call("call_00_elsewhere")],
        }
        history = [
            user,
            without_reasoning(message),
            *tool_results_for(message),
            foreign,
            {"role": "tool", "tool_call_id": "call_00_elsewhere", "content": "x"},
        ]
        before = repairs_total(proxy, "reasoning_content_missing")
        body = {"model": DEEPSEEK.model, "stream": stream, "messages": history}
        response = post_chat(f"{proxy}/v1", body)
        received = fake.requests[-1].json["messages"]
        # The known step got its receipt; the unknown one nothing (no invented reasoning).
        assert received[1]["reasoning_content"] == message["reasoning_content"]
        assert received[3:] == history[3:]
        # DeepSeek's 400 reaches the client unchanged.
        assert fake.rejections == [Rejection("missing", 3)]
        status, sent = fake.responses[-1]
        assert (response.status_code, response.content) == (status, sent)
        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/json")
        assert wait_for_repairs_total(proxy, "reasoning_content_missing", before + 1) == before + 1


def test_openrouter_unknown_message_gets_nothing() -> None:
    # OpenRouter documents no placeholder: a message the proxy never saw goes as it is.
    with behind_proxy(OPENROUTER) as (fake, _, proxy):
        history = [
            {"role": "user", "content": "read a.txt"},
            {"role": "assistant", "content": "", "tool_calls": [tool_call("tool_read_file_x")]},
            {"role": "tool", "tool_call_id": "tool_read_file_x", "content": "x"},
            {"role": "assistant", "content": "It says x."},
            {"role": "user", "content": "and b.txt?"},
        ]
        response = post_chat(proxy, {"model": OPENROUTER.model, "messages": history})
        assert response.status_code == 200, response.text
        assert fake.requests[-1].json["messages"] == history


# ── tenants and upstreams ────────────────────────────────────────────────────


def _shared_ids(turn: int, step: int, position: int) -> str:
    return f"call_{position:02d}_shared{turn}{step}"


@pytest.mark.parametrize(
    "config", [{}, {"signatures.tenant_header": "x-tenant"}], ids=["credential", "tenant-header"]
)
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS.values(), ids=PROVIDERS.keys())
def test_tenants_never_see_each_others_reasoning(
    provider: Provider, stream: bool, config: dict[str, Any]
) -> None:
    """Two clients get the same call ids; each follow-up must carry its own client's receipt.
    Requests interleave, so a store keyed by call ids alone would hand over the other's."""
    by_header = bool(config)
    with behind_proxy(provider, config, fixed_ids=_shared_ids) as (fake, _, proxy):
        clients, histories = {}, {}
        for name in ("one", "two"):
            key = "sk-shared" if by_header else f"sk-{name}"
            headers = {"x-tenant": name} if by_header else {}
            clients[name] = openai_client(proxy, key, default_headers=headers)
            histories[name] = [{"role": "user", "content": "read a.txt"}]
        issued: dict[str, Any] = {}
        for name, client in clients.items():
            kwargs = {"model": provider.model, "messages": histories[name], "tools": OPENAI_TOOLS}
            (call,) = final_message(client, stream, **kwargs).tool_calls
            assert call.id == "call_00_shared00"
            issued[name] = fake.issued_log[-1].receipt
            rebuilt = {"role": "assistant", "content": "", "tool_calls": [history_call(call)]}
            histories[name] += [rebuilt, {"role": "tool", "tool_call_id": call.id, "content": "x"}]
        assert issued["one"] != issued["two"]
        for name, client in clients.items():
            client.chat.completions.create(
                model=provider.model, messages=histories[name], tools=OPENAI_TOOLS
            )
            assert fake.requests[-1].json["messages"][1][provider.field] == issued[name], name
        assert fake.rejections == []


def test_receipts_stay_with_the_upstream_that_issued_them() -> None:
    """One proxy, three routes: DeepSeek, OpenRouter and a plain OpenAI-compatible upstream.
    DeepSeek and OpenRouter hand out the same call ids (to the same client), so only keys that
    name the upstream keep their receipts apart; and histories carried from one to another
    must arrive without the other's reasoning."""
    with (
        running_deepseek_upstream(fixed_ids=_shared_ids, seed=1) as (ds, ds_root),
        running_openrouter_upstream(fixed_ids=_shared_ids, seed=2) as (orr, or_root),
        running_fake_upstream() as (plain, plain_root),
    ):
        routes = [
            {"name": "ds", "models": ["deepseek-*"], "base_url": f"{ds_root}/v1"},
            {
                "name": "or",
                "models": ["google/*"],
                "base_url": f"{or_root}/api/v1",
                "profile": "openrouter",
            },
        ]
        with running_proxy(f"{plain_root}/v1", routes=routes) as root:
            proxy = f"{root}/v1"
            user = {"role": "user", "content": "read a.txt"}
            histories: dict[str, list[dict[str, Any]]] = {}
            for provider, stream in ((DEEPSEEK, True), (OPENROUTER, False)):
                body = {"model": provider.model, "stream": stream, "messages": [user]}
                assert post_chat(proxy, body).status_code == 200
                (call_id,) = (ds if provider is DEEPSEEK else orr).issued_log[-1].call_ids
                assert call_id == "call_00_shared00"
                histories[provider.name] = [
                    user,
                    {"role": "assistant", "content": "", "tool_calls": [tool_call(call_id)]},
                    {"role": "tool", "tool_call_id": call_id, "content": "x"},
                ]
            # Each upstream gets its own receipt back on the same ids, and nothing else.
            for provider, fake in ((DEEPSEEK, ds), (OPENROUTER, orr)):
                body = {"model": provider.model, "messages": histories[provider.name]}
                assert post_chat(proxy, body).status_code == 200
                received = fake.requests[-1].json["messages"][1]
                assert received[provider.field] == fake.issued_log[0].receipt
                assert set(received) - set(histories[provider.name][1]) == {provider.field}
            assert ds.rejections == orr.rejections == []

            # Fresh ids only one upstream issued: a history carried to another upstream (a chat
            # that switches models mid-way) arrives there without the reasoning.
            ds.fixed_ids = orr.fixed_ids = None
            for provider in (DEEPSEEK, OPENROUTER):
                fake = ds if provider is DEEPSEEK else orr
                assert (
                    post_chat(proxy, {"model": provider.model, "messages": [user]}).status_code
                    == 200
                )
                (call_id,) = fake.issued_log[-1].call_ids
                history = [
                    user,
                    {"role": "assistant", "content": "", "tool_calls": [tool_call(call_id)]},
                    {"role": "tool", "tool_call_id": call_id, "content": "x"},
                ]
                # Proof that the proxy holds this receipt: the issuing upstream gets it back.
                assert (
                    post_chat(proxy, {"model": provider.model, "messages": history}).status_code
                    == 200
                )
                assert fake.requests[-1].json["messages"][1][provider.field]
                others = [
                    (
                        orr if provider is DEEPSEEK else ds,
                        OPENROUTER.model if provider is DEEPSEEK else DEEPSEEK.model,
                    ),
                    (plain, "openai_indexed_parallel"),
                ]
                for other, model in others:
                    for stream in (False, True):
                        post_chat(proxy, {"model": model, "stream": stream, "messages": history})
                        received = [
                            r for r in other.requests if r.path.endswith("/chat/completions")
                        ]
                        assert received[-1].json["messages"] == history, (provider.name, model)
            # DeepSeek rejects OpenRouter's steps (it never issued them), without any reasoning.
            assert {r.reason for r in ds.rejections} == {"missing"}
            assert orr.rejections == []


# Issue 26: two reasoning details sharing index 0 (OpenRouter relaying Grok, Vercel's AI Gateway
# relaying Gemini 3), on a host named by configuration and on one that says nothing.
SHARED_INDEX_CONFIGS = {"openrouter": {"upstream.profile": "openrouter"}, "plain-host": {}}


@pytest.mark.parametrize("mode", ["stream", "create"])
@pytest.mark.parametrize("config", SHARED_INDEX_CONFIGS.values(), ids=SHARED_INDEX_CONFIGS.keys())
def test_two_details_sharing_an_index_go_back_as_two(config: dict[str, Any], mode: str) -> None:
    # Before: the encrypted detail was captured merged into the text one, and that single
    # detail went upstream: OpenRouter's "Corrupted thought signature." 400.
    config = {"upstream.profile": "auto", **config}
    with behind_proxy(OPENROUTER, config, shared_index=True) as (fake, _, proxy):
        assert run_openai_flow(proxy, OPENROUTER, mode) == FINAL_TEXTS
        assert fake.rejections == []
        assert assert_receipts_returned(fake, OPENROUTER) > 0
        assert all(len(issued.receipt) == 2 for issued in fake.issued_log)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "non-streamed"])
def test_a_client_keeping_two_details_that_share_an_index_is_left_alone(stream: bool) -> None:
    # Before: the client's correct two-detail value was "restored" to the merged one.
    with behind_proxy(OPENROUTER, {"upstream.profile": "auto"}, shared_index=True) as (
        fake,
        _,
        proxy,
    ):
        question = {"role": "user", "content": "read a.txt"}
        body = {"model": OPENROUTER.model, "messages": [question], "tools": OPENAI_TOOLS}
        assert post_chat(proxy, {**body, "stream": stream}).status_code == 200
        issued = fake.issued_log[0]
        assert [d["index"] for d in issued.receipt] == [0, 0]
        step = {
            "role": "assistant",
            "content": "",
            "reasoning_details": issued.receipt,
            "tool_calls": [tool_call(i) for i in issued.call_ids],
        }
        follow_up = {**body, "messages": [question, step, *tool_results_for(step)]}
        answer = post_chat(proxy, follow_up)
        assert answer.status_code == 200, answer.text
        assert fake.rejections == []
        assert fake.chat_requests[-1]["messages"][1]["reasoning_details"] == issued.receipt
        assert repairs_total(proxy.removesuffix("/v1"), "reasoning_details_restored") == 0
