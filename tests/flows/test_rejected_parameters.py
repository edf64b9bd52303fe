"""Request parameters the upstream refuses, through the real proxy under uvicorn.

- The learned fallback: a 400/422 whose real body names a top-level parameter the request sent
  is answered by one more send without it (the client sees only the success, streamed or not),
  and the next request goes without it at once; a 429, a 500, an error naming what the request
  is (`messages`, `tools`, `model`) or a key the request lacks is never retried; a second
  rejection reaches the client as it came; Redis shares what one proxy learned with another.
- The profiles' tables: each rule against a fake that refuses exactly that parameter, and a
  request needing none going upstream byte-identical.

The fake is tests/support/rejecting_upstream.py, with each provider's real error body.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis

from tests.support.openai_errors import as_chat_clients_get
from tests.support.proxies import running_proxy
from tests.support.redis_server import RedisServer, started_redis_server
from tests.support.rejecting_upstream import (
    RejectingUpstream,
    Rejection,
    cerebras_value_unsupported,
    gemini_unknown_name,
    groq_unsupported,
    mistral_extra_forbidden,
    openai_unknown_parameter,
    running_rejecting_upstream,
)
from tests.support.waiting import wait_until

USER = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]

# The real bodies, each naming the parameter as that upstream does.
REJECTIONS: dict[str, tuple[str, Any, Rejection]] = {
    "gemini": ("store", False, gemini_unknown_name("store")),
    "mistral": (
        "max_completion_tokens",
        64,
        mistral_extra_forbidden("max_completion_tokens", 64),
    ),
    "groq": ("store", True, groq_unsupported("store", "stop")),
    "openai": (
        "stream_options",
        {"include_usage": True},
        openai_unknown_parameter("stream_options"),
    ),
}


@pytest.fixture
def fake() -> Iterator[tuple[RejectingUpstream, str]]:
    upstream = RejectingUpstream()
    with running_rejecting_upstream(upstream) as base_url:
        yield upstream, base_url


def post(proxy: str, body: dict[str, Any] | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return httpx.post(
        f"{proxy}/v1/chat/completions",
        content=content,
        headers={"content-type": "application/json", "authorization": "Bearer sk-test"},
        timeout=30,
    )


def repairs(response: httpx.Response) -> str:
    return response.headers.get("x-streamfix-repairs", "")


# ── the learned fallback ─────────────────────────────────────────────────────


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("upstream", sorted(REJECTIONS))
def test_a_rejected_parameter_is_dropped_sent_once_more_and_then_left_out_at_once(
    fake: tuple[RejectingUpstream, str], upstream: str, stream: bool
) -> None:
    upstream_fake, base_url = fake
    name, value, rejection = REJECTIONS[upstream]
    upstream_fake.rejects[name] = rejection
    client = openai.OpenAI(api_key="sk-test", max_retries=0, timeout=30)
    with running_proxy(base_url) as proxy:
        client = client.with_options(base_url=f"{proxy}/v1")
        extra = {"extra_body": {name: value}}
        for _ in range(2):
            if stream:
                chunks = list(
                    client.chat.completions.create(
                        model="m", messages=USER, stream=True, temperature=0.5, **extra
                    )
                )
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                completion = client.chat.completions.create(
                    model="m", messages=USER, temperature=0.5, **extra
                )
                text = completion.choices[0].message.content or ""
            assert text == "hi"
    first, retried, later = upstream_fake.bodies()
    assert first[name] == value
    assert name not in retried
    assert retried == {k: v for k, v in first.items() if k != name}
    assert later == retried  # the next request went without it at once: one request


def test_the_learned_drop_is_counted_and_logged_once_with_the_request_id(
    fake: tuple[RejectingUpstream, str], caplog: pytest.LogCaptureFixture
) -> None:
    upstream_fake, base_url = fake
    upstream_fake.rejects["metadata"] = openai_unknown_parameter("metadata")
    body = {"model": "m", "messages": USER, "metadata": {"a": "b"}}
    with caplog.at_level("WARNING"), running_proxy(base_url) as proxy:
        learned = post(proxy, body)
        remembered = post(proxy, body)
    assert learned.status_code == remembered.status_code == 200
    assert "parameter_learned:1" in repairs(learned)
    assert "parameter_dropped" not in repairs(learned)
    assert "parameter_dropped:1" in repairs(remembered)
    warnings = [r.getMessage() for r in caplog.records if "parameter_learned" in r.getMessage()]
    assert len(warnings) == 1
    assert learned.headers["x-request-id"] in warnings[0]
    assert "metadata" in warnings[0]
    assert len(upstream_fake.requests) == 3


@pytest.mark.parametrize("status", [429, 500, 503])
def test_no_other_status_is_ever_retried(fake: tuple[RejectingUpstream, str], status: int) -> None:
    upstream_fake, base_url = fake
    _, body = openai_unknown_parameter("store")  # even a body that names a parameter sent
    upstream_fake.fixed = (status, body)
    with running_proxy(base_url) as proxy:
        response = post(proxy, {"model": "m", "messages": USER, "store": True})
    assert response.status_code == status
    assert response.content == body
    assert len(upstream_fake.requests) == 1


@pytest.mark.parametrize(
    ("name", "rejection"),
    [
        ("messages", mistral_extra_forbidden("messages", [])),
        ("tools", mistral_extra_forbidden("tools", [])),
        ("model", openai_unknown_parameter("model")),
        ("tool_choice", gemini_unknown_name("tool_choice")),
        ("stream", groq_unsupported("stream", "stop")),
    ],
)
def test_an_error_naming_what_the_request_is_is_never_retried(
    fake: tuple[RejectingUpstream, str], name: str, rejection: Rejection
) -> None:
    upstream_fake, base_url = fake
    upstream_fake.rejects[name] = rejection
    body = {"model": "m", "messages": USER, "tools": TOOLS, "tool_choice": "auto"}
    body["stream"] = False
    with running_proxy(base_url) as proxy:
        response = post(proxy, body)
    assert response.status_code == rejection[0]
    assert response.content == as_chat_clients_get(rejection[1])
    assert len(upstream_fake.requests) == 1


def test_an_error_naming_a_key_the_request_does_not_have_is_not_retried(
    fake: tuple[RejectingUpstream, str],
) -> None:
    upstream_fake, base_url = fake
    rejection = gemini_unknown_name("thinking")
    upstream_fake.rejects["user"] = rejection  # refuses `user`, but names `thinking`
    with running_proxy(base_url) as proxy:
        response = post(proxy, {"model": "m", "messages": USER, "user": "u1"})
    assert (response.status_code, response.content) == (
        rejection[0],
        as_chat_clients_get(rejection[1]),
    )
    assert len(upstream_fake.requests) == 1


def test_a_schema_keyword_gemini_names_inside_the_tools_is_not_a_parameter(
    fake: tuple[RejectingUpstream, str],
) -> None:
    upstream_fake, base_url = fake
    message = (
        'Invalid JSON payload received. Unknown name "store" at '
        "'tools[0].function_declarations[0].parameters': Cannot find field."
    )
    body = orjson.dumps([{"error": {"code": 400, "message": message}}])
    upstream_fake.rejects["tools"] = (400, body)
    with running_proxy(base_url, **{"upstream.schema_dialect": "none"}) as proxy:
        response = post(proxy, {"model": "m", "messages": USER, "tools": TOOLS, "store": True})
    assert response.status_code == 400
    assert len(upstream_fake.requests) == 1


def test_a_second_rejection_goes_to_the_client_as_it_came(
    fake: tuple[RejectingUpstream, str],
) -> None:
    upstream_fake, base_url = fake
    second = mistral_extra_forbidden("messages", [])
    upstream_fake.rejects["store"] = gemini_unknown_name("store")
    upstream_fake.rejects["user"] = second
    with running_proxy(base_url) as proxy:
        response = post(proxy, {"model": "m", "messages": USER, "store": True, "user": "u"})
    assert (response.status_code, response.content) == second
    assert len(upstream_fake.requests) == 2  # only ever one retry


def test_every_parameter_one_error_names_goes_in_the_same_retry(
    fake: tuple[RejectingUpstream, str],
) -> None:
    upstream_fake, base_url = fake
    # Mistral lists every extra field at once (Gitlawb/openclaude#739).
    detail = [
        {"type": "extra_forbidden", "loc": ["body", n], "msg": "Extra inputs are not permitted"}
        for n in ("store", "max_completion_tokens")
    ]
    upstream_fake.rejects["store"] = (422, orjson.dumps({"detail": detail}))
    body = {"model": "m", "messages": USER, "store": False, "max_completion_tokens": 8}
    with running_proxy(base_url) as proxy:
        response = post(proxy, body)
    assert response.status_code == 200
    assert upstream_fake.bodies()[1] == {"model": "m", "messages": USER}


def test_with_learning_off_the_rejection_goes_to_the_client(
    fake: tuple[RejectingUpstream, str],
) -> None:
    upstream_fake, base_url = fake
    rejection = gemini_unknown_name("store")
    upstream_fake.rejects["store"] = rejection
    with running_proxy(base_url, **{"upstream.learn_rejected_parameters": False}) as proxy:
        response = post(proxy, {"model": "m", "messages": USER, "store": True})
    assert (response.status_code, response.content) == (
        rejection[0],
        as_chat_clients_get(rejection[1]),
    )
    assert len(upstream_fake.requests) == 1


def test_a_proxy_sharing_the_redis_drops_what_another_learned(
    fake: tuple[RejectingUpstream, str],
) -> None:
    upstream_fake, base_url = fake
    upstream_fake.rejects["store"] = groq_unsupported("store", "stop")
    body = {"model": "m", "messages": USER, "store": True}
    for server in started_redis_server():
        config = {"receipts.store": server.url}
        with running_proxy(base_url, **config) as proxy_a:
            assert post(proxy_a, body).status_code == 200
        assert len(upstream_fake.requests) == 2
        wait_until(lambda s=server: learned_keys(s), "the learned parameter in redis")
        with running_proxy(base_url, **config) as proxy_b:
            response = post(proxy_b, body)
        assert response.status_code == 200
        assert "parameter_dropped:1" in repairs(response)
        assert len(upstream_fake.requests) == 3  # proxy B sent one request, without it
        assert "store" not in upstream_fake.bodies()[2]
        keys = learned_keys(server)
        assert len(keys) == 1 and keys[0].endswith(b":store")


def learned_keys(server: RedisServer) -> list[bytes]:
    client = redis.Redis.from_url(server.url)
    try:
        return list(client.scan_iter(match="streamfix:learned:*"))
    finally:
        client.close()


# ── the profiles' tables ─────────────────────────────────────────────────────

# profile, what the client sends, the fake's refusal, what the upstream must receive instead
TABLE = [
    ("gemini", {"store": True}, ("store", gemini_unknown_name("store")), {}),
    (
        "gemini",
        {"prompt_cache_key": "k"},
        ("prompt_cache_key", gemini_unknown_name("prompt_cache_key")),
        {},
    ),
    (
        "mistral",
        {"max_completion_tokens": 32},
        ("max_completion_tokens", mistral_extra_forbidden("max_completion_tokens", 32)),
        {"max_tokens": 32},
    ),
    ("mistral", {"store": False}, ("store", mistral_extra_forbidden("store", False)), {}),
    ("groq", {"store": True}, ("store", groq_unsupported("store", "stop")), {}),
    (
        "cerebras",
        {"parallel_tool_calls": False},
        (
            "parallel_tool_calls",
            lambda v: cerebras_value_unsupported("parallel_tool_calls", v) if v is False else None,
        ),
        {},
    ),
]


@pytest.mark.parametrize(
    ("profile", "sent", "refusal", "received"),
    TABLE,
    ids=[f"{row[0]}-{next(iter(row[1]))}" for row in TABLE],
)
def test_each_table_rule_meets_an_upstream_that_refuses_exactly_that(
    fake: tuple[RejectingUpstream, str],
    profile: str,
    sent: dict[str, Any],
    refusal: tuple[str, Any],
    received: dict[str, Any],
) -> None:
    upstream_fake, base_url = fake
    upstream_fake.rejects[refusal[0]] = refusal[1]
    config = {"upstream.profile": profile, "upstream.learn_rejected_parameters": False}
    body = {"model": "m", "messages": USER, **sent}
    with running_proxy(base_url, **config) as proxy:
        response = post(proxy, body)
    assert response.status_code == 200, response.text
    kind = "parameter_renamed" if received else "parameter_dropped"
    assert f"{kind}:1" in repairs(response)
    assert upstream_fake.bodies() == [{"model": "m", "messages": USER, **received}]


def test_without_the_table_the_same_upstreams_refuse(fake: tuple[RejectingUpstream, str]) -> None:
    """The rules are what makes the requests above pass: the generic profile sends them as
    they are, and (learning off) the client gets the refusal."""
    upstream_fake, base_url = fake
    for _, sent, refusal, _ in TABLE:
        upstream_fake.rejects = {refusal[0]: refusal[1]}
        config = {"upstream.learn_rejected_parameters": False}
        with running_proxy(base_url, **config) as proxy:
            response = post(proxy, {"model": "m", "messages": USER, **sent})
        assert response.status_code in (400, 422)


@pytest.mark.parametrize("profile", ["gemini", "mistral", "groq", "cerebras", "generic"])
def test_a_request_needing_nothing_goes_upstream_byte_identical(
    fake: tuple[RejectingUpstream, str], profile: str
) -> None:
    upstream_fake, base_url = fake
    # Spacing and key order as a client wrote them; nothing in it any table touches (a true
    # parallel_tool_calls is what Cerebras takes).
    raw = (
        b'{"messages": [{"role":"user","content":"hi"}],"model":"m", "temperature":0.2,'
        b'"max_tokens":9,"parallel_tool_calls":true,"stream":false}'
    )
    with running_proxy(base_url, **{"upstream.profile": profile}) as proxy:
        response = post(proxy, raw)
    assert response.status_code == 200
    assert upstream_fake.requests == [raw]
    assert "parameter_" not in repairs(response)


def test_mistral_keeps_the_clients_own_max_tokens_over_the_renamed_one(
    fake: tuple[RejectingUpstream, str],
) -> None:
    upstream_fake, base_url = fake
    upstream_fake.rejects["max_completion_tokens"] = mistral_extra_forbidden(
        "max_completion_tokens", 5
    )
    body = {"model": "m", "messages": USER, "max_tokens": 7, "max_completion_tokens": 5}
    with running_proxy(base_url, **{"upstream.profile": "mistral"}) as proxy:
        response = post(proxy, body)
    assert response.status_code == 200
    assert upstream_fake.bodies() == [{"model": "m", "messages": USER, "max_tokens": 7}]
