"""Token usage in /metrics, over real sockets, from what the upstream reported (the fake replays
transcripts, so the expected counts are the transcripts' own `usage`), through every door; and
the bound on model names per route."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from prometheus_client import CollectorRegistry, generate_latest

from proxy.repair.answer_facts import AnswerFacts
from proxy.server.token_metrics import MAX_MODELS_PER_ROUTE, OTHER, TokenMetrics
from tests.support.fake_upstream import load_transcript, running_fake_upstream
from tests.support.metrics import metric
from tests.support.proxies import running_proxy

MESSAGES_HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "go"}], **extra}


def reported(name: str) -> tuple[str, dict[str, Any]]:
    """The answering model and the last usage report of transcript `name`'s stream."""
    chunks = [
        orjson.loads(event.removeprefix(b"data: "))
        for event in load_transcript(name).events
        if event.startswith(b"data: {")
    ]
    usages = [chunk["usage"] for chunk in chunks if chunk.get("usage")]
    return chunks[0]["model"], usages[-1]


def usage_labels(request_model: str, response_model: str, kind: str) -> dict[str, str]:
    """The histogram's labels, in the order the exposition gives them (sorted)."""
    return {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": "default",
        "gen_ai_request_model": request_model,
        "gen_ai_response_model": response_model,
        "gen_ai_token_type": kind,
        "route": "default",
    }


def test_a_streamed_exchange_counts_the_last_usage_it_reported() -> None:
    name = "gemini_usage_on_every_chunk"
    model, usage = reported(name)
    with running_fake_upstream() as (_, root), running_proxy(f"{root}/v1") as proxy:
        before = httpx.get(f"{proxy}/metrics").text
        response = httpx.post(f"{proxy}/v1/chat/completions", json=chat(name, stream=True))
        assert response.status_code == 200
        after = httpx.get(f"{proxy}/metrics").text
    assert "streamfix_tokens_total{" not in before
    input_tokens, output_tokens = usage["prompt_tokens"], usage["completion_tokens"]
    labels = {"model": model, "route": "default"}
    assert metric(after, "streamfix_tokens_total", **labels, type="input") == input_tokens
    assert metric(after, "streamfix_tokens_total", **labels, type="output") == output_tokens
    for kind, tokens in (("input", input_tokens), ("output", output_tokens)):
        histogram = usage_labels(name, model, kind)
        assert metric(after, "gen_ai_client_token_usage_count", **histogram) == 1
        assert metric(after, "gen_ai_client_token_usage_sum", **histogram) == tokens
    assert metric(after, "streamfix_token_models_folded_total", route="default") == 0


def test_an_exchange_without_usage_counts_no_tokens() -> None:
    name = "openai_text_multibyte_utf8"
    assert not any(b'"usage":{' in event for event in load_transcript(name).events)
    with running_fake_upstream() as (_, root), running_proxy(f"{root}/v1") as proxy:
        response = httpx.post(f"{proxy}/v1/chat/completions", json=chat(name, stream=True))
        assert response.status_code == 200
        text = httpx.get(f"{proxy}/metrics").text
    assert metric(text, "streamfix_requests_total", route="default", status="200") == 1
    assert "streamfix_tokens_total{" not in text
    assert "gen_ai_client_token_usage_count{" not in text


def test_every_door_counts_the_tokens_of_its_chat_call() -> None:
    name = "openai_text_usage_only_last_chunk"
    model, usage = reported(name)
    messages = {"max_tokens": 100, "messages": [{"role": "user", "content": "go"}]}
    doors = [
        ("/v1/chat/completions", chat(name, stream=True), {}),
        ("/v1/responses", {"model": name, "input": "go", "stream": True}, {}),
        ("/v1/messages", {"model": name, "stream": True, **messages}, MESSAGES_HEADERS),
    ]
    with running_fake_upstream() as (_, root), running_proxy(f"{root}/v1") as proxy:
        for path, body, headers in doors:
            response = httpx.post(f"{proxy}{path}", json=body, headers=headers)
            assert response.status_code == 200, response.text
        text = httpx.get(f"{proxy}/metrics").text
    labels = {"model": model, "route": "default"}
    inputs = metric(text, "streamfix_tokens_total", **labels, type="input")
    outputs = metric(text, "streamfix_tokens_total", **labels, type="output")
    assert (inputs, outputs) == (3 * usage["prompt_tokens"], 3 * usage["completion_tokens"])
    histogram = usage_labels(name, model, "input")
    assert metric(text, "gen_ai_client_token_usage_count", **histogram) == 3


def test_model_names_past_the_bound_are_counted_as_other() -> None:
    registry = CollectorRegistry()
    tokens = TokenMetrics(registry)
    for n in range(MAX_MODELS_PER_ROUTE + 3):
        tokens.count("r", "openai", f"m{n}", AnswerFacts(model=f"m{n}-v1", input_tokens=10))
    tokens.count("r", "openai", "m0", AnswerFacts(model="m0-v1", input_tokens=5))  # known
    tokens.count("s", "openai", "m999", AnswerFacts(model="m999-v1", input_tokens=1))  # own
    text = generate_latest(registry).decode()
    models = {
        line.split('model="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("streamfix_tokens_total{") and 'route="r"' in line
    }
    assert len(models) == MAX_MODELS_PER_ROUTE + 1
    assert OTHER in models and f"m{MAX_MODELS_PER_ROUTE}-v1" not in models
    other = {"model": OTHER, "route": "r", "type": "input"}
    assert metric(text, "streamfix_tokens_total", **other) == 30
    assert metric(text, "streamfix_tokens_total", model="m0-v1", route="r", type="input") == 15
    assert metric(text, "streamfix_token_models_folded_total", route="r") == 3
    assert metric(text, "streamfix_token_models_folded_total", route="s") == 0
    assert metric(text, "streamfix_tokens_total", model="m999-v1", route="s", type="input") == 1
    # Output was not reported: nothing counted for it, not a zero.
    assert 'type="output"' not in text
