"""The two phases: what the request phase hands on, and which links phase two builds from it."""

from __future__ import annotations

import asyncio
import copy

from proxy.repair.calls.assembly import ToolCall
from proxy.repair.profiles import PROFILES
from proxy.repair.repairs import stream_links
from proxy.repair.repairs.call_fixes import (
    ArgumentMending,
    DoubleDecoding,
    IdMinting,
    NameInference,
)
from proxy.repair.repairs.receipt_capture import ReceiptCapture
from proxy.repair.repairs.text_reasoning import TextReasoningRepair
from proxy.repair.repairs.text_tool_calls import TextToolCallRepair
from proxy.repair.repairs.tool_names import ToolNamesRestored
from proxy.repair.rules import RouteRuleKeys, RouteRules, resolve
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope
from proxy.settings.chain import chain_options
from proxy.settings.schema import Settings
from tests.repair.markup.test_recogniser import WEATHER
from tests.support.phases import exchange, forwarded, phases

PLAIN = {
    "model": "m",
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
}


def test_a_request_no_repair_touches_is_unchanged_and_decides_nothing() -> None:
    body = copy.deepcopy(PLAIN)
    chain, sent, tally, changed = exchange(body, scope=ReceiptScope("t", "u"))
    assert changed is False and body == PLAIN and sent.body is body
    assert dict(sent.tool_names_back) == {} and tally.repairs == {}
    kinds = [type(link) for link in chain.links]
    assert ToolNamesRestored not in kinds and TextToolCallRepair not in kinds
    assert ReceiptCapture in kinds  # a tenant on the evidence profile: receipts kept


def test_links_with_nothing_to_do_are_not_built() -> None:
    options = chain_options(Settings())
    store = phases().store
    rules = RouteRules(tool_names="openai")
    plain = stream_links(options, forwarded(copy.deepcopy(PLAIN), rules), Tally("t"), store)
    kinds = {type(link) for link in plain}
    assert TextReasoningRepair in kinds
    assert not kinds & {TextToolCallRepair, ToolNamesRestored, ReceiptCapture}
    body = {"messages": [], "tools": [{"type": "function", "function": {"name": "a.b"}}, WEATHER]}
    chain, sent, _, changed = exchange(body, rules, scope=ReceiptScope("t", "u"))
    assert changed and dict(sent.tool_names_back) == {"a_b": "a.b"}
    kinds = {type(link) for link in chain.links}
    assert {TextToolCallRepair, ToolNamesRestored, ReceiptCapture} <= kinds


def test_the_declared_tools_are_read_once_from_the_forwarded_body() -> None:
    sent = forwarded({"messages": [], "tools": [WEATHER]})
    assert sent.declared_tools is sent.declared_tools
    assert "get_weather" in sent.declared_tools  # type: ignore[operator]
    assert forwarded({"messages": []}).declared_tools is None


def test_each_call_fix_counts_what_it_did() -> None:
    tally = Tally("t")
    sent = forwarded({"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER]})
    broken = [ToolCall(0, fragments=['{"city": "Par']), ToolCall(1, fragments=['is"}{"a": 1}'])]
    ArgumentMending(tally).apply(broken)
    assert [c.arguments for c in broken] == ['{"city": "Paris"}', '{"a": 1}']
    nameless = ToolCall(0, fragments=['{"city": "Paris"}'])
    assert NameInference(sent, tally).name(nameless, 0) == "get_weather"
    twice = ToolCall(0, name="get_weather", fragments=['"{\\"city\\": \\"Paris\\"}"'])
    DoubleDecoding(sent, tally).apply(twice)
    assert twice.arguments == '{"city":"Paris"}'
    minting = IdMinting(sent, tally)
    first = minting.mint(nameless, "chatcmpl-1", 0, "get_weather")
    assert first == IdMinting(sent, Tally("u")).mint(nameless, "chatcmpl-1", 0, "get_weather")
    assert tally.repairs == {
        "arguments_leak": 2,
        "tool_call_name_inferred": 1,
        "arguments_decoded_twice": 1,
        "tool_call_id_generated": 1,
    }
    unknown = forwarded({"messages": [], "tools": [WEATHER, {"function": {"name": "other"}}]})
    assert NameInference(unknown, tally).name(ToolCall(3, fragments=["[]"]), 0) is None
    assert tally.repairs["tool_call_without_name"] == 1


def test_the_request_phase_can_run_again_on_the_clients_body() -> None:
    """A resend with other rules: the client's body parsed again, the phase run again."""
    both = phases()
    client = {"messages": [{"role": "developer", "content": "d"}], "store": True}
    first, _ = asyncio.run(
        both.request(copy.deepcopy(client), RouteRules(), ReceiptScope(None, "none"), Tally("a"))
    )
    assert first.body == client
    mistral = resolve(RouteRuleKeys(), PROFILES["mistral"])
    again, changed = asyncio.run(
        both.request(copy.deepcopy(client), mistral, ReceiptScope(None, "none"), Tally("b"))
    )
    assert changed and again.body == {"messages": [{"role": "system", "content": "d"}]}
