"""Every request rule learned from the refusal that calls for it, through the real proxy under
uvicorn, with no configuration: the upstream is a fake on 127.0.0.1 with model "m" (no vendor
anywhere, so the generic profile applies) refusing as one real upstream does, with its real
body (tests/support/refusing_upstream.py).

For each rule, streamed and not: the first request succeeds after exactly one refused send, the
next is sent right the first time; the learned kind is counted. A text that only looks like
one (another field, another status, a 429 or a 5xx, a request without what it names) is never
retried; a key set explicitly is never learned over; a second refusal reaches the client as it
came; two proxies sharing a real Redis learn it once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import orjson
import pytest
import redis

from proxy.routing.rules_view import learned
from proxy.settings.schema import ReceiptSettings, Settings
from tests.support.limit_upstreams import dashscope_forced_tool, litellm_anthropic_forced_tool
from tests.support.message_upstreams import (
    deepseek_roles,
    kimi_tool_content,
    lmstudio_content,
    mistral_content,
    mistral_ids,
    mistral_roles,
    qwen_template,
)
from tests.support.part_upstreams import groq_parts, ttl_refused
from tests.support.proxies import running_proxy
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.refusing_upstream import (
    ANSWER_PREFIX,
    JSON,
    Checker,
    RefusingUpstream,
    Rejection,
    deepseek_formats,
    gemini_schemas,
    moonshot_schemas,
    running_refusing_upstream,
    tool_names,
)
from tests.support.waiting import wait_until

USER = {"role": "user", "content": "read a.txt"}


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    schema = parameters or {"type": "object", "properties": {"path": {"type": "string"}}}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


def history(content: Any, call_id: str = "abcdefghi", result: Any = "sunny") -> list[Any]:
    """A tool turn already run: the assistant's call (beside `content`) and its result."""
    call = {"id": call_id, "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    assistant = {"role": "assistant", "content": content, "tool_calls": [call]}
    return [USER, assistant, {"role": "tool", "tool_call_id": call_id, "content": result}]


@dataclass(frozen=True)
class Case:
    key: str
    """The route key the refusal calls for (its kind: `<key>_learned`)."""
    refuses: Checker
    request: dict[str, Any]


OBJECT = {"type": "object", "properties": {"path": {"type": "string"}}}
MARKED_TEXT = {"type": "text", "text": "read a.txt"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "output", "schema": OBJECT}}
CASES = {
    # Gemini: 'Unknown name "additionalProperties" at 'tools[0]…parameters': Cannot find field.'
    "schema_keyword": Case(
        "schema_dialect",
        gemini_schemas,
        {"messages": [USER], "tools": [tool("read", {**OBJECT, "additionalProperties": False})]},
    ),
    # Gemini: 'Proto field is not repeating, cannot start list.' for a type array.
    "schema_type_array": Case(
        "schema_dialect",
        gemini_schemas,
        {
            "messages": [USER],
            "tools": [tool("read", {**OBJECT, "properties": {"p": {"type": ["string", "null"]}}})],
        },
    ),
    # Moonshot: '… is not a valid moonshot flavored json schema, … type is not defined'.
    "schema_moonshot": Case(
        "schema_dialect",
        moonshot_schemas,
        {
            "messages": [USER],
            "tools": [tool("read", {**OBJECT, "properties": {"mode": {"enum": ["a", "b"]}}})],
        },
    ),
    # Gemini: 'Invalid function name. Must start with a letter or an underscore…'
    "tool_names_gemini": Case(
        "tool_names",
        tool_names("gemini"),
        {"messages": [USER], "tools": [tool("mcp/files/read")]},
    ),
    # OpenAI / DeepSeek: "Invalid 'tools[0].function.name': string does not match pattern."
    "tool_names_openai": Case(
        "tool_names",
        tool_names("openai"),
        {"messages": [USER], "tools": [tool("files.read")]},
    ),
    # DeepSeek (serde, 422, plain text): "messages[0]: unknown role: developer".
    "developer_role_serde": Case(
        "developer_role",
        deepseek_roles,
        {"messages": [{"role": "developer", "content": "Be brief."}, USER]},
    ),
    # FastAPI's 422 detail list at messages[0].role.
    "developer_role_detail": Case(
        "developer_role",
        mistral_roles,
        {"messages": [{"role": "developer", "content": "Be brief."}, USER]},
    ),
    # vLLM with Qwen 3.5+: "System message must be at the beginning."
    "system_messages": Case(
        "system_messages",
        qwen_template,
        {
            "messages": [
                {"role": "system", "content": "A"},
                USER,
                {"role": "system", "content": "B"},
            ]
        },
    ),
    # Mistral: "Tool call id was call_abc123 but must be a-z, A-Z, 0-9, with a length of 9."
    "tool_call_ids": Case("tool_call_ids", mistral_ids, {"messages": history(None, "call_abc123")}),
    # Mistral: "Assistant message must have either content or tool_calls, but not both."
    "assistant_null": Case("assistant_tool_content", mistral_content, {"messages": history("")}),
    # LM Studio: "Invalid 'content': 'content' field must be a string or an array of objects."
    "assistant_empty": Case(
        "assistant_tool_content", lmstudio_content, {"messages": history(None)}
    ),
    # Kimi: "messages[2]: invalid type: sequence, expected a string".
    "tool_content": Case(
        "tool_content",
        kimi_tool_content,
        {"messages": history(None, result=[{"type": "text", "text": "sunny"}])},
    ),
    # DeepSeek: "This response_format type is unavailable now" (its JSON mode wants "json" said).
    "response_format_schema": Case(
        "response_format_schema",
        deepseek_formats,
        {"messages": [USER], "response_format": JSON_SCHEMA},
    ),
    # DashScope: "The tool_choice parameter does not support being set to required or object
    # in thinking mode" (Qwen thinks by default there).
    "forced_tool_choice_unforced": Case(
        "forced_tool_choice",
        dashscope_forced_tool,
        {"messages": [USER], "tools": [tool("read")], "tool_choice": "required"},
    ),
    # LiteLLM relaying Anthropic: "Thinking may not be enabled when tool_choice forces tool use."
    "forced_tool_choice_without_thinking": Case(
        "forced_tool_choice",
        litellm_anthropic_forced_tool,
        {
            "messages": [USER],
            "tools": [tool("read")],
            "tool_choice": {"type": "function", "function": {"name": "read"}},
            "reasoning_effort": "high",
        },
    ),
    # Groq: "… property 'cache_control' is unsupported", to a chat client marking for OpenRouter.
    "cache_control": Case(
        "cache_control",
        groq_parts,
        {"messages": [{"role": "user", "content": [{**MARKED_TEXT, "cache_control": HOUR}]}]},
    ),
    # Anthropic behind a gateway: "messages.0.0.cache_control.ttl: Extra inputs are not permitted".
    "cache_control_ttl": Case(
        "cache_control",
        ttl_refused,
        {"messages": [{"role": "user", "content": [{**MARKED_TEXT, "cache_control": HOUR}]}]},
    ),
}


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[RefusingUpstream, str]]:
    fake = RefusingUpstream(request.param)
    with running_refusing_upstream(fake) as base_url:
        yield fake, base_url


def post(proxy: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{proxy}/v1/chat/completions",
        content=orjson.dumps(body),
        headers={"content-type": JSON, "authorization": "Bearer sk-test"},
        timeout=30,
    )


def repairs(response: httpx.Response) -> str:
    return response.headers.get("x-streamfix-repairs", "")


def answered(response: httpx.Response, stream: bool) -> tuple[str, list[str]]:
    """The answer's text and its calls' names, as a client gets them."""
    if not stream:
        message = response.json()["choices"][0]["message"]
        calls = [call["function"]["name"] for call in message.get("tool_calls") or ()]
        return message.get("content") or "", calls
    assert response.text.endswith("data: [DONE]\n\n")
    text, names = "", []
    for line in response.text.splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in orjson.loads(line[6:])["choices"]:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            names += [c["function"]["name"] for c in delta.get("tool_calls") or () if "id" in c]
    return text, names


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("case", "served"), [(name, case.refuses) for name, case in CASES.items()], indirect=["served"]
)
def test_a_refusal_calling_for_a_rule_is_learned_after_one_send_and_applied_from_then_on(
    served: tuple[RefusingUpstream, str], case: str, stream: bool
) -> None:
    fake, base_url = served
    rule = CASES[case]
    body = {"model": "m", **rule.request, "stream": stream}
    with running_proxy(base_url) as proxy:
        learned = post(proxy, body)
        remembered = post(proxy, body)
    assert learned.status_code == remembered.status_code == 200, learned.text
    assert fake.refused() == [True, False, False]  # one refused send, then right every time
    first, resent, later = fake.bodies()
    assert first == body  # the generic profile sent it as it came
    assert later == resent
    assert f"{rule.key}_learned:1" in repairs(learned)
    assert "_learned" not in repairs(remembered)
    declared = [t["function"]["name"] for t in rule.request.get("tools", ())]
    for response in (learned, remembered):
        text, calls = answered(response, stream)
        if declared:  # the client's own name, though another went up for a renamed one
            assert calls == declared[:1]
        else:
            assert text.startswith(ANSWER_PREFIX)


def refusal_text(message: str, status: int = 400) -> Rejection:
    return status, JSON, orjson.dumps({"error": {"message": message, "type": "BadRequestError"}})


GEMINI_KEYWORD = (
    'Invalid JSON payload received. Unknown name "additionalProperties" at '
    "'tools[0].function_declarations[0].parameters': Cannot find field."
)
SYSTEM_FIRST = "System message must be at the beginning."
TOOLS = [tool("read", {**OBJECT, "additionalProperties": False})]
TWO_SYSTEMS = [{"role": "system", "content": "A"}, USER, {"role": "system", "content": "B"}]
LOOKALIKES = {
    # Another field: Gemini's words about the response schema, not the tools'.
    "another_field": (
        refusal_text(
            GEMINI_KEYWORD.replace(
                "tools[0].function_declarations[0].parameters", "generation_config.response_schema"
            )
        ),
        {"messages": [USER], "tools": TOOLS},
    ),
    # Another status: vLLM's words, but in a 422.
    "another_status": (refusal_text(SYSTEM_FIRST, 422), {"messages": TWO_SYSTEMS}),
    "429": (refusal_text(SYSTEM_FIRST, 429), {"messages": TWO_SYSTEMS}),
    "500": (refusal_text(GEMINI_KEYWORD, 500), {"messages": [USER], "tools": TOOLS}),
    "503": (refusal_text(SYSTEM_FIRST, 503), {"messages": TWO_SYSTEMS}),
    # Mistral's words about call ids, to a request that has none.
    "nothing_it_names": (
        refusal_text("Tool call id was call_abc123 but must be a-z, A-Z, 0-9, with a length of 9."),
        {"messages": [USER]},
    ),
    # The developer role refused, to a request without a developer message.
    "no_developer": (
        (422, "text/plain", b"messages[0].role: unknown variant `developer`, expected one of"),
        {"messages": TWO_SYSTEMS[:2]},
    ),
    # DeepSeek's words about the response format, to a request already in JSON mode (nothing
    # to downgrade), and in a 429.
    "json_mode_refused": (
        refusal_text("This response_format type is unavailable now"),
        {"messages": [USER], "response_format": {"type": "json_object"}},
    ),
    "format_429": (
        refusal_text("This response_format type is unavailable now", 429),
        {"messages": [USER], "response_format": JSON_SCHEMA},
    ),
    # DeepSeek's words about a forced tool choice, to a request that forces none.
    "nothing_forced": (
        refusal_text("Thinking mode does not support this tool_choice"),
        {"messages": [USER], "tools": TOOLS, "tool_choice": "auto"},
    ),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("lookalike", sorted(LOOKALIKES))
def test_a_text_that_only_looks_like_a_refusal_is_never_retried(
    lookalike: str, stream: bool
) -> None:
    rejection, request = LOOKALIKES[lookalike]
    fake = RefusingUpstream(lambda body, raw: None, fixed=rejection)
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        response = post(proxy, {"model": "m", **request, "stream": stream})
    assert (response.status_code, response.content) == (rejection[0], rejection[2])
    assert len(fake.received) == 1
    assert "_learned" not in repairs(response)


@pytest.mark.parametrize(
    ("key", "value", "case"),
    [
        ("tool_names", "none", "tool_names_gemini"),
        ("schema_dialect", "none", "schema_keyword"),
        ("developer_role", "keep", "developer_role_serde"),
        ("system_messages", "as_sent", "system_messages"),
        ("response_format_schema", "as_sent", "response_format_schema"),
        ("forced_tool_choice", "as_sent", "forced_tool_choice_unforced"),
    ],
)
def test_a_key_set_explicitly_is_never_learned_over(key: str, value: str, case: str) -> None:
    rule = CASES[case]
    fake = RefusingUpstream(rule.refuses)
    body = {"model": "m", **rule.request}
    with (
        running_refusing_upstream(fake) as base_url,
        running_proxy(base_url, **{f"upstream.{key}": value}) as proxy,
    ):
        responses = [post(proxy, body) for _ in range(2)]
    assert all(r.status_code in (400, 422) for r in responses)
    assert fake.refused() == [True, True]  # each request sent once, as it came
    assert fake.bodies() == [body, body]


def test_a_second_refusal_reaches_the_client_as_it_came() -> None:
    second = refusal_text(SYSTEM_FIRST)
    fake = RefusingUpstream(deepseek_roles)
    body = {"model": "m", "messages": [{"role": "developer", "content": "Be brief."}, USER]}

    def refuses_again(request: dict[str, Any], raw: bytes) -> Rejection | None:
        return deepseek_roles(request, raw) or second

    fake.refuses = refuses_again
    with running_refusing_upstream(fake) as base_url, running_proxy(base_url) as proxy:
        response = post(proxy, body)
    assert (response.status_code, response.content) == (second[0], second[2])
    assert len(fake.received) == 2  # never a third send


def test_learned_once_logged_once_with_the_request_id(caplog: pytest.LogCaptureFixture) -> None:
    rule = CASES["system_messages"]
    fake = RefusingUpstream(rule.refuses)
    body = {"model": "m", **rule.request}
    with (
        caplog.at_level("WARNING"),
        running_refusing_upstream(fake) as base_url,
        running_proxy(base_url) as proxy,
    ):
        learned = post(proxy, body)
        later = post(proxy, body)
    assert learned.status_code == later.status_code == 200
    assert "system_messages_merged:1" in repairs(later)
    lines = [r.getMessage() for r in caplog.records if "system_messages_learned" in r.getMessage()]
    assert len(lines) == 1
    assert learned.headers["x-request-id"] in lines[0]
    assert 'system_messages = "merged"' in lines[0]


def test_two_proxies_sharing_a_redis_learn_it_once() -> None:
    rule = CASES["developer_role_serde"]
    fake = RefusingUpstream(rule.refuses)
    body = {"model": "m", **rule.request}
    with running_refusing_upstream(fake) as base_url:
        for server in started_redis_server():
            fake.received.clear()
            config = {"receipts.store": server.url}
            with running_proxy(base_url, **config) as proxy_a:
                assert post(proxy_a, body).status_code == 200
            assert fake.refused() == [True, False]
            wait_until(lambda s=server: learned_keys(s), "the learned rule in redis")
            with running_proxy(base_url, **config) as proxy_b:
                response = post(proxy_b, body)
            assert response.status_code == 200
            assert "role_developer_to_system:1" in repairs(response)
            assert "_learned" not in repairs(response)
            assert fake.refused() == [True, False, False]  # proxy B sent it right at once
            keys = learned_keys(server)
            assert len(keys) == 1 and keys[0].endswith(b":developer_role:system")
            # `streamfix config` shows it beside the route's keys.
            upstream = Settings().with_values({"upstream.base_url": base_url}).upstream
            receipts = ReceiptSettings(store=server.url)
            shown = learned(receipts, upstream, {})
            assert shown == "developer_role:system (model m, refused with 422)"
            elsewhere = replace(upstream, base_url="http://127.0.0.1:1/v1")
            assert learned(receipts, elsewhere, {}) == "nothing yet"


def learned_keys(server: RedisServer) -> list[bytes]:
    client = redis.Redis.from_url(server.url)
    try:
        return list(client.scan_iter(match="streamfix:learned:*"))
    finally:
        client.close()
