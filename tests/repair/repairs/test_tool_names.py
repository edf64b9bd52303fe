"""ToolNamesRenamed and ToolNamesRestored, both phases in-process: the request renamed for the
upstream, every call in its answer (its own, one whose name was inferred, one recognised in
text) given the client's name back, streamed and not."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from proxy.repair.calls.tool_names import TOOL_NAME_RULES
from proxy.repair.pipeline import RepairChain
from proxy.repair.profiles import PROFILES
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.routing.routes import Router
from proxy.settings.schema import ConfigError, Settings
from tests.support.phases import exchange as both_phases
from tests.support.streams import assembled_calls, chat_stream

GEMINI = "https://generativelanguage.googleapis.com/v1beta/openai"
READ = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def request(*names: str) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "read a.txt"}],
        "tools": [
            {"type": "function", "function": {"name": name, "parameters": READ}} for name in names
        ],
    }


def chain_for(body: dict[str, Any], rule: str) -> tuple[RepairChain, Tally, bool]:
    chain, _, tally, changed = both_phases(body, RouteRules(tool_names=rule))
    return chain, tally, changed


def streamed(chain: RepairChain, raw: bytes) -> bytes:
    async def upstream() -> AsyncIterator[bytes]:
        yield raw

    return asyncio.run(chat_stream(upstream(), chain))


def sse(*deltas: dict[str, Any], finish: str = "tool_calls") -> bytes:
    chunks = [{"choices": [{"index": 0, "delta": delta}]} for delta in deltas]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def call_delta(name: str | None, arguments: str = '{"path": "a.txt"}') -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    return {"index": 0, "id": "call_1", "type": "function", "function": function}


def names(body: bytes) -> list[str]:
    return [c["name"] for c in assembled_calls(body)[0]]


def completion(message: dict[str, Any], finish: str = "tool_calls") -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


def test_the_upstream_is_sent_names_it_accepts_and_the_client_gets_its_own() -> None:
    body = request("files.read", "mcp/server/list")
    chain, exchange, changed = chain_for(body, "openai")
    assert changed
    assert [t["function"]["name"] for t in body["tools"]] == ["files_read", "mcp_server_list"]
    assert exchange.repairs["tool_name_renamed"] == 2
    out = streamed(chain, sse({"role": "assistant", "tool_calls": [call_delta("files_read")]}))
    assert names(out) == ["files.read"]
    assert b"files_read" not in out
    assert exchange.repairs["tool_name_restored"] == 1


def test_an_inferred_name_is_the_clients_too() -> None:
    chain, exchange, _ = chain_for(request("files.read"), "openai")
    out = streamed(chain, sse({"role": "assistant", "tool_calls": [call_delta(None)]}))
    assert names(out) == ["files.read"]
    assert exchange.repairs["tool_call_name_inferred"] == 1


def test_a_call_written_as_text_with_the_upstreams_name_comes_back_under_the_clients() -> None:
    chain, exchange, _ = chain_for(request("files.read"), "openai")
    text = '<tool_call>\n{"name": "files_read", "arguments": {"path": "a.txt"}}\n</tool_call>'
    out = streamed(chain, sse({"role": "assistant", "content": text}, finish="stop"))
    (call,) = assembled_calls(out)[0]
    assert call["name"] == "files.read"
    assert json.loads(call["arguments"]) == {"path": "a.txt"}
    assert exchange.repairs["tool_name_restored"] == 1


def test_non_streamed_the_message_calls_get_the_clients_names() -> None:
    body = request("files.read", "2fa_check")
    body["stream"] = False
    chain, exchange, _ = chain_for(body, "gemini")
    assert [t["function"]["name"] for t in body["tools"]] == ["files.read", "_2fa_check"]
    answer = completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "_2fa_check", "arguments": "{}"},
                },
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "files.read", "arguments": "{}"},
                },
            ],
        }
    )
    assert asyncio.run(chain.on_response(answer))
    calls = answer["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["2fa_check", "files.read"]
    assert exchange.repairs["tool_name_restored"] == 1


def test_non_streamed_text_call_and_inferred_name_are_mapped_back() -> None:
    body = request("files.read")
    body["stream"] = False
    chain, _, _ = chain_for(body, "openai")
    text = '<tool_call>\n{"name": "files_read", "arguments": {"path": "a.txt"}}\n</tool_call>'
    answer = completion({"role": "assistant", "content": text}, finish="stop")
    asyncio.run(chain.on_response(answer))
    (call,) = answer["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "files.read"

    chain, _, _ = chain_for(request("files.read"), "openai")
    nameless = {"id": "a", "type": "function", "function": {"arguments": '{"path": "a"}'}}
    answer = completion({"role": "assistant", "content": None, "tool_calls": [nameless]})
    asyncio.run(chain.on_response(answer))
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "files.read"


def test_without_a_rule_or_a_bad_name_nothing_changes() -> None:
    for rule, names_sent in (("", ("files.read",)), ("openai", ("files_read", "ls"))):
        body = request(*names_sent)
        before = orjson.dumps(body)
        chain, exchange, changed = chain_for(body, rule)
        assert not changed and orjson.dumps(body) == before
        raw = sse({"role": "assistant", "tool_calls": [call_delta(names_sent[0])]})
        # The answer as the chain without a name rule gives it, byte for byte.
        plain, _, _ = chain_for(request(*names_sent), "")
        assert streamed(chain, raw) == streamed(plain, raw)
        assert "tool_name_renamed" not in exchange.repairs


def test_a_name_the_client_never_had_is_left_as_the_upstream_sent_it() -> None:
    chain, exchange, _ = chain_for(request("files.read", "files_list"), "openai")
    raw = sse({"role": "assistant", "tool_calls": [call_delta("files_list")]})
    assert names(streamed(chain, raw)) == ["files_list"]
    assert "tool_name_restored" not in exchange.repairs


def test_the_client_request_it_was_made_from_is_not_needed_afterwards() -> None:
    # The mapping comes from the request itself: the same request renamed twice, in two
    # exchanges, gives the same names (nothing is kept between them).
    first, second = request("mcp/server/read"), request("mcp/server/read")
    chain_for(first, "gemini")
    chain_for(copy.deepcopy(second), "gemini")
    chain_for(second, "gemini")
    assert first == second


def test_each_profile_has_its_upstreams_rule() -> None:
    rules = {name: profile.tool_names for name, profile in PROFILES.items()}
    assert rules["gemini"] == rules["vertex"] == "gemini"
    assert rules["openai"] == rules["deepseek"] == "openai"
    # The evidence profile and the gateways pass names as sent: nothing shows what they refuse.
    for name in ("generic", "vllm", "kimi", "openrouter"):
        assert rules[name] == ""
    assert set(rules.values()) <= {"", *TOOL_NAME_RULES}


def test_a_route_chooses_its_rule_or_none() -> None:
    settings = Settings().with_values(
        {
            "upstream.base_url": "https://generativelanguage.googleapis.com/v1beta/openai",
            "routes": [
                {"name": "raw", "models": ["raw-*"], "base_url": GEMINI, "tool_names": "none"},
                {
                    "name": "gw",
                    "models": ["gw-*"],
                    "base_url": "http://127.0.0.1:9/v1",
                    "tool_names": "openai",
                },
            ],
        }
    )
    router = Router(settings, {})
    default, raw, gateway = router.default, router.route_for("raw-1"), router.route_for("gw-1")
    assert default.rules("m").tool_names == "gemini"  # auto: the profile's
    assert raw.rules("m").tool_names == ""
    assert gateway.rules("m").tool_names == "openai"  # behind any gateway


def test_an_unknown_rule_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="tool_names"):
        Settings().with_values({"upstream.tool_names": "anthropic"})
