"""ToolSchemaRepair: each tool's parameters rewritten for the profile's dialect, every change
counted, and a request that needs nothing left as it came. A fake Gemini, rejecting exactly
what Gemini rejects with its own error body, refuses the request as agents send it and takes
it once rewritten."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import orjson

from proxy.repair.dialects.schemas import DIALECTS, rewrite_schema
from proxy.repair.profiles import PROFILES, ProviderProfile
from proxy.repair.repairs.tool_schemas import ToolSchemaRepair
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.routing.routes import Router
from proxy.settings.schema import Settings
from tests.repair.dialects.accepts import gemini_violations, moonshot_violations
from tests.repair.dialects.samples import ALREADY_FINE, EDIT_TOOL, MCP_TOOL
from tests.support.phases import apply


def tool(name: str, parameters: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


GEMINI = "https://generativelanguage.googleapis.com/v1beta/openai"


def request(*tools: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": list(tools)}


def run(profile: ProviderProfile, body: dict[str, Any]) -> tuple[bool, Tally]:
    rules = RouteRules(profile, schema_dialect=profile.schema_dialect)
    changed, context = apply(ToolSchemaRepair(), body, rules)
    return changed, context.tally


def fake_gemini(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Gemini's OpenAI endpoint, as far as tool schemas go: 400 with every violation in the
    shape its bodies are quoted in (openswarm#24, CLIProxyAPI#97), else 200."""
    violations = [
        (at, message)
        for index, entry in enumerate(body.get("tools", []))
        for at in [f"tools[0].function_declarations[{index}].parameters"]
        for message in gemini_violations(entry["function"].get("parameters", {}), at)
    ]
    if not violations:
        return 200, {"object": "chat.completion", "choices": []}
    return 400, {
        "error": {
            "code": 400,
            "message": "\n".join(message for _, message in violations),
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [
                        {"field": at, "description": message} for at, message in violations
                    ],
                }
            ],
        }
    }


def fake_moonshot(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    for entry in body.get("tools", []):
        errors = moonshot_violations(entry["function"].get("parameters", {}))
        if errors:
            return 400, {"error": {"message": errors[0], "type": "invalid_request_error"}}
    return 200, {"object": "chat.completion", "choices": []}


def test_gemini_rejects_the_agents_request_and_takes_the_rewritten_one() -> None:
    body = request(tool("edit", EDIT_TOOL), tool("create_tasks", MCP_TOOL))
    status, error = fake_gemini(body)
    assert status == 400
    assert error["error"]["message"].startswith(
        'Invalid JSON payload received. Unknown name "$schema" at '
        "'tools[0].function_declarations[0].parameters': Cannot find field."
    )
    sent = copy.deepcopy(body)
    changed, exchange = run(PROFILES["gemini"], sent)
    assert changed
    assert fake_gemini(sent) == (200, {"object": "chat.completion", "choices": []})
    expected: Counter[str] = Counter()
    for schema in (EDIT_TOOL, MCP_TOOL):
        expected.update(rewrite_schema(schema, DIALECTS["gemini"])[1])
    assert exchange.repairs == expected
    assert exchange.repairs["schema_ref_inlined"] == 2
    assert "schema_keyword_removed:" in exchange.summary()


def test_vertex_uses_the_same_dialect() -> None:
    assert PROFILES["vertex"].schema_dialect == PROFILES["gemini"].schema_dialect == "gemini"
    body = request(tool("edit", EDIT_TOOL))
    assert run(PROFILES["vertex"], body)[0] and fake_gemini(body)[0] == 200


def test_only_the_tools_that_need_it_are_rewritten() -> None:
    fine = copy.deepcopy(ALREADY_FINE)
    body = request(tool("read", fine), tool("edit", copy.deepcopy(EDIT_TOOL)))
    changed, _ = run(PROFILES["gemini"], body)
    assert changed and body["tools"][0]["function"]["parameters"] is fine


def test_a_request_that_needs_nothing_goes_out_byte_for_byte() -> None:
    body = request(tool("read", copy.deepcopy(ALREADY_FINE)), tool("noop", {}))
    raw = orjson.dumps(body)
    changed, exchange = run(PROFILES["gemini"], body)
    assert not changed and orjson.dumps(body) == raw and exchange.summary() == "none"


def test_an_upstream_without_a_dialect_gets_the_schemas_as_written() -> None:
    for name in ("openai", "generic", "deepseek", "openrouter", "vllm"):
        assert PROFILES[name].schema_dialect == ""
        body = request(tool("edit", copy.deepcopy(EDIT_TOOL)))
        raw = orjson.dumps(body)
        changed, exchange = run(PROFILES[name], body)
        assert not changed and orjson.dumps(body) == raw and exchange.summary() == "none"


def test_moonshot_rejects_the_agents_request_and_takes_the_rewritten_one() -> None:
    profile = PROFILES["kimi"]  # api.moonshot.ai / .cn
    assert profile.schema_dialect == "moonshot"
    loose = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    body = request(tool("create_tasks", MCP_TOOL), tool("pick", loose), tool("noop", {}))
    status, error = fake_moonshot(body)
    assert status == 400 and "moonshot flavored json schema" in error["error"]["message"]
    changed, exchange = run(profile, body)
    assert changed and fake_moonshot(body)[0] == 200
    assert exchange.repairs["schema_type_moved_into_any_of"] == 1
    assert exchange.repairs["schema_type_added"] == 1  # the empty root: "object"


def test_tools_that_are_not_functions_with_schemas_are_left() -> None:
    odd: list[Any] = [
        "x",
        {"type": "web_search"},
        {"type": "function", "function": "x"},
        {"type": "function", "function": {"name": "f"}},
        {"type": "function", "function": {"name": "g", "parameters": None}},
    ]
    body = {"model": "m", "tools": copy.deepcopy(odd)}
    assert run(PROFILES["gemini"], body)[0] is False and body["tools"] == odd
    for tools in (None, "x", {}):
        assert run(PROFILES["gemini"], {"model": "m", "tools": tools})[0] is False
    assert run(PROFILES["gemini"], {"model": "m"})[0] is False


def test_a_route_chooses_its_dialect_or_none() -> None:
    settings = Settings().with_values(
        {
            "upstream.base_url": "https://generativelanguage.googleapis.com/v1beta/openai",
            "routes": [
                {"name": "raw", "models": ["raw-*"], "base_url": GEMINI, "schema_dialect": "none"},
                {
                    "name": "kimi-gw",
                    "models": ["kimi-*"],
                    "base_url": "http://127.0.0.1:9/v1",
                    "schema_dialect": "moonshot",
                },
            ],
        }
    )
    router = Router(settings, {})
    default, raw, gateway = router.default, router.route_for("raw-1"), router.route_for("kimi-k2")
    assert default.rules("m").schema_dialect == "gemini"  # auto: the profile's
    assert raw.rules("m").schema_dialect == ""
    assert gateway.rules("m").schema_dialect == "moonshot"  # behind any gateway
