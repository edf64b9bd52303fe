"""The upstream call's span in OpenTelemetry's GenAI conventions, over real sockets, for every
door: chat completions streamed and whole, the Responses and the Messages fronts. What the
answer says (model, id, finish reasons, usage) is read from the transcripts the fake upstream
replays, and the finish reasons are the client's, after the repairs."""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
import pytest

from proxy.routing.provider_names import provider_name
from proxy.server.app import create_app
from proxy.server.tracing import Tracing
from proxy.settings.schema import Settings
from tests.support.fake_upstream import load_transcript
from tests.support.servers import free_port, serve_in_thread
from tests.support.tracing import exchange_spans, in_memory_exporter, traced_proxy

USAGE_KEYS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.reasoning.output_tokens",
)
MESSAGES_HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


@pytest.fixture
def exporter() -> Any:
    return in_memory_exporter()


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


def upstream_chunks(name: str) -> list[dict[str, Any]]:
    """The JSON chunks the fake upstream streams for transcript `name`."""
    return [
        orjson.loads(event.removeprefix(b"data: "))
        for event in load_transcript(name).events
        if event.startswith(b"data: {")
    ]


def last_usage(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    (usage, *_) = [chunk["usage"] for chunk in reversed(chunks) if chunk.get("usage")]
    return usage


def client_finishes(response: httpx.Response) -> dict[int, str]:
    """Each choice's last finish reason in the stream the client received."""
    finishes: dict[int, str] = {}
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line.removeprefix("data: ")).get("choices", []):
                if choice.get("finish_reason"):
                    finishes[choice.get("index", 0)] = choice["finish_reason"]
    return finishes


def test_a_repaired_stream_has_the_conventions_attributes_and_the_clients_finish(
    exporter: Any,
) -> None:
    from opentelemetry.trace import StatusCode

    with traced_proxy(exporter) as (fake, proxy):
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json=chat("gemini_empty_id", stream=True, temperature=0.2, max_tokens=50, seed=7),
        )
        assert response.status_code == 200
        server, call = exchange_spans(exporter)
    chunks = upstream_chunks("gemini_empty_id")
    usage = last_usage(chunks)
    assert call.name == "chat gemini_empty_id"
    assert call.status.status_code is StatusCode.UNSET
    attributes = dict(call.attributes)
    host, port = fake.requests[-1].headers["host"].split(":")
    assert attributes == {
        "gen_ai.operation.name": "chat",
        # A local upstream the proxy cannot name: named as its route is.
        "gen_ai.provider.name": "default",
        "server.address": host,
        "server.port": int(port),
        "streamfix.route": "default",
        "streamfix.front": "chat_completions",
        "streamfix.stream": True,
        "gen_ai.request.model": "gemini_empty_id",
        "gen_ai.request.max_tokens": 50,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.seed": 7,
        "http.response.status_code": 200,
        "gen_ai.response.model": chunks[0]["model"],
        "gen_ai.response.id": chunks[0]["id"],
        "gen_ai.usage.input_tokens": usage["prompt_tokens"],
        "gen_ai.usage.output_tokens": usage["completion_tokens"],
        # The upstream said "stop" beside its call; the client got "tool_calls".
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    upstream_finishes = [c.get("finish_reason") for ch in chunks for c in ch["choices"]]
    assert "stop" in upstream_finishes and "tool_calls" not in upstream_finishes
    assert client_finishes(response) == {0: "tool_calls"}
    assert server.attributes["streamfix.front"] == "chat_completions"
    # The call's span holds the GenAI attributes; the exchange's keeps only the request model.
    assert not [key for key in server.attributes if key.startswith("gen_ai.usage")]


def test_a_non_streamed_answer_gives_the_same_attributes(exporter: Any) -> None:
    with traced_proxy(exporter) as (_, proxy):
        response = httpx.post(
            f"{proxy}/v1/chat/completions", json=chat("gemini_indexless_call_stop")
        )
        assert response.status_code == 200
        _, call = exchange_spans(exporter)
    body = load_transcript("gemini_indexless_call_stop").response
    assert body is not None
    attributes = call.attributes
    assert attributes["streamfix.stream"] is False
    assert attributes["gen_ai.response.model"] == body["model"]
    assert attributes["gen_ai.response.id"] == body["id"]
    assert attributes["gen_ai.usage.input_tokens"] == body["usage"]["prompt_tokens"]
    assert attributes["gen_ai.usage.output_tokens"] == body["usage"]["completion_tokens"]
    assert attributes["gen_ai.response.finish_reasons"] == tuple(
        choice["finish_reason"] for choice in response.json()["choices"]
    )


def test_without_usage_no_usage_is_claimed_and_every_choice_has_its_finish(
    exporter: Any,
) -> None:
    with traced_proxy(exporter) as (_, proxy):
        response = httpx.post(
            f"{proxy}/v1/chat/completions", json=chat("openai_n2_choices", stream=True, n=2)
        )
        assert response.status_code == 200
        _, call = exchange_spans(exporter)
    chunks = upstream_chunks("openai_n2_choices")
    assert not any(chunk.get("usage") for chunk in chunks)
    assert not [key for key in USAGE_KEYS if key in call.attributes]
    finishes = client_finishes(response)
    assert sorted(finishes) == [0, 1]
    assert call.attributes["gen_ai.response.finish_reasons"] == (finishes[0], finishes[1])
    assert call.attributes["gen_ai.request.choice.count"] == 2
    assert call.attributes["gen_ai.response.model"] == chunks[0]["model"]


def test_usage_on_every_chunk_is_the_last_report(exporter: Any) -> None:
    with traced_proxy(exporter) as (_, proxy):
        httpx.post(
            f"{proxy}/v1/chat/completions", json=chat("gemini_usage_on_every_chunk", stream=True)
        )
        _, call = exchange_spans(exporter)
    chunks = upstream_chunks("gemini_usage_on_every_chunk")
    usage = last_usage(chunks)
    assert usage != chunks[0]["usage"]  # running totals: the first report is not the answer's
    assert call.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert call.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]


def test_an_error_inside_the_upstreams_stream_makes_the_call_an_error(exporter: Any) -> None:
    from opentelemetry.trace import StatusCode

    with traced_proxy(exporter) as (_, proxy):
        response = httpx.post(
            f"{proxy}/v1/chat/completions",
            json=chat("openrouter_error_chunk_midstream", stream=True),
        )
        assert response.status_code == 200
        server, call = exchange_spans(exporter)
    assert call.status.status_code is StatusCode.ERROR
    assert call.attributes["error.type"] == "upstream_error_event"
    assert server.status.status_code is StatusCode.UNSET  # the proxy answered 200


def test_an_upstream_that_never_answers_makes_the_call_an_error(exporter: Any) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import StatusCode

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    closed = free_port()  # nothing listens there
    app = create_app(Settings().with_values({"upstream.base_url": f"http://127.0.0.1:{closed}/v1"}))
    app.state.proxy.tracing = Tracing(provider)
    with serve_in_thread(app) as proxy:
        response = httpx.post(f"{proxy}/v1/chat/completions", json=chat("m", stream=True))
        server, call = exchange_spans(exporter)
    assert response.status_code == 502
    assert call.status.status_code is StatusCode.ERROR
    assert call.attributes["error.type"] == "502"  # the proxy's status: no upstream status came
    assert "http.response.status_code" not in call.attributes
    assert call.attributes["server.port"] == closed
    assert not [key for key in USAGE_KEYS if key in call.attributes]
    assert server.attributes["http.response.status_code"] == 502


@pytest.mark.parametrize(
    ("path", "body", "headers", "front"),
    [
        ("/v1/responses", {"input": "go"}, {}, "responses"),
        (
            "/v1/messages",
            {"max_tokens": 100, "messages": [{"role": "user", "content": "go"}]},
            MESSAGES_HEADERS,
            "messages",
        ),
    ],
)
@pytest.mark.parametrize("stream", [True, False])
def test_the_fronts_calls_have_the_same_span(
    exporter: Any,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    front: str,
    stream: bool,
) -> None:
    # Streamed: a text answer with usage on its last chunk; whole: the one transcript with a
    # non-streamed answer and usage that the fake serves.
    name = "openai_text_usage_only_last_chunk" if stream else "gemini_indexless_call_stop"
    with traced_proxy(exporter) as (_, proxy):
        response = httpx.post(
            f"{proxy}{path}", json={"model": name, "stream": stream, **body}, headers=headers
        )
        assert response.status_code == 200, response.text
        server, call = exchange_spans(exporter)
    if stream:
        chunks = upstream_chunks(name)
        model, answer_id, usage = chunks[0]["model"], chunks[0]["id"], last_usage(chunks)
        finishes: tuple[str, ...] = ("stop",)
    else:
        whole = load_transcript(name).response
        assert whole is not None
        model, answer_id, usage = whole["model"], whole["id"], whole["usage"]
        finishes = ("tool_calls",)
    assert call.name == f"chat {name}"
    attributes = call.attributes
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["streamfix.front"] == front == server.attributes["streamfix.front"]
    assert attributes["gen_ai.request.model"] == name
    assert attributes["gen_ai.response.model"] == model
    assert attributes["gen_ai.response.id"] == answer_id
    assert attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    # The chat completion's finish reasons, which the front translated for its client.
    assert attributes["gen_ai.response.finish_reasons"] == finishes


@pytest.mark.parametrize(
    ("base_url", "profile", "expected"),
    [
        ("https://generativelanguage.googleapis.com/v1beta/openai", "auto", "gcp.gemini"),
        ("https://us-central1-aiplatform.googleapis.com/v1/projects/p", "auto", "gcp.vertex_ai"),
        ("https://api.openai.com/v1", "auto", "openai"),
        ("https://team.openai.azure.com/openai/v1", "auto", "azure.ai.openai"),
        ("https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1", "auto", "aws.bedrock"),
        ("https://api.deepseek.com", "auto", "deepseek"),
        ("https://api.mistral.ai/v1", "auto", "mistral_ai"),
        ("https://api.groq.com/openai/v1", "auto", "groq"),
        ("https://api.x.ai/v1", "auto", "x_ai"),
        ("https://openrouter.ai/api/v1", "auto", "openrouter"),
        ("https://API.DEEPSEEK.COM", "auto", "deepseek"),
        # The host first: a profile configured for a known host does not rename it.
        ("https://api.deepseek.com", "generic", "deepseek"),
        # An unknown host: the configured profile names it, else the route's name.
        ("http://127.0.0.1:8000/v1", "vllm", "vllm"),
        ("http://gpu-box:8000/v1", "mistral", "mistral_ai"),
        ("http://127.0.0.1:8000/v1", "auto", "local"),
        ("http://127.0.0.1:8000/v1", "generic", "local"),
        ("https://notopenai.com/v1", "auto", "local"),
    ],
)
def test_the_provider_is_named_from_the_host_then_the_profile_then_the_route(
    base_url: str, profile: str, expected: str
) -> None:
    assert provider_name(base_url, profile, "local") == expected
