"""POST /v1/messages through the real proxy against upstreams that misbehave: the repaired
chat stream as Messages events (transcripts of real upstreams), errors before and after the
first byte, a stream cut mid-tool-use, a silent upstream (pings), Anthropic's error shape."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.replay_check import check_directory
from proxy.settings.schema import Settings
from tests.fronts.messages_checks import parse, violations
from tests.support.fake_upstream import running_fake_upstream
from tests.support.proxies import running_proxy
from tests.support.raw_upstream import (
    Reply,
    chunked,
    delta_chunk,
    http_chunk,
    http_head,
    raw_upstream,
)
from tests.support.rejecting_upstream import (
    RejectingUpstream,
    openai_unknown_parameter,
    running_rejecting_upstream,
)

HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def body(model: str, stream: bool = True, **extra: Any) -> dict[str, Any]:
    tools = [
        {"name": n, "input_schema": {"type": "object"}}
        for n in ("get_weather", "get_time", "read_file", "list_dir", "search", "lookup")
    ]
    return {
        "model": model,
        "max_tokens": 200,
        "stream": stream,
        "messages": [{"role": "user", "content": "go"}],
        "tools": tools,
        **extra,
    }


def post(proxy: str, payload: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{proxy}/v1/messages", json=payload, headers=HEADERS, timeout=30)


def tool_blocks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks = []
    for event in events:
        if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use":
            blocks.append({**event["content_block"], "json": ""})
        elif (
            event["type"] == "content_block_delta" and event["delta"]["type"] == "input_json_delta"
        ):
            blocks[-1]["json"] += event["delta"]["partial_json"]
    return blocks


@pytest.mark.parametrize(
    "transcript",
    [
        "gemini_indexless_call_stop",
        "gemini_indexless_fragmented_parallel",
        "vertex_jumping_index",
        "vllm_args_tail_under_next_index",
        "kimi_per_round_ids",
        "openrouter_reasoning_and_reasoning_content",
        "minimax_think_tag_in_content",
        "openai_text_usage_only_last_chunk",
    ],
)
def test_transcripts_come_out_as_valid_messages_streams(transcript: str) -> None:
    with running_fake_upstream() as (_, root), running_proxy(f"{root}/v1") as proxy:
        answer = post(proxy, body(transcript))
        assert answer.status_code == 200, answer.text
        events = parse(answer.content)
        assert violations(events) == []
        ids = [block["id"] for block in tool_blocks(events)]
        assert len(ids) == len(set(ids))  # Vertex's jumping index: no duplicated blocks
        for block in tool_blocks(events):
            assert isinstance(json.loads(block["json"]), dict)
        whole = post(proxy, body(transcript, stream=False))
        if whole.status_code == 404:
            return  # the transcript has no non-streamed answer
        assert whole.status_code == 200, whole.text
        message = whole.json()
        assert message["type"] == "message"
        assert [b["type"] for b in message["content"] if b["type"] == "tool_use"] == [
            "tool_use" for _ in ids
        ]


def test_an_upstream_error_before_the_first_byte_keeps_its_status_in_anthropics_shape() -> None:
    with running_fake_upstream() as (_, root), running_proxy(f"{root}/v1") as proxy:
        answer = post(proxy, body("error_openai_429"))
        assert answer.status_code == 429
        assert answer.json()["type"] == "error"
        assert answer.json()["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize(
    "transcript", ["openrouter_error_chunk_midstream", "groq_event_error_midstream"]
)
def test_an_upstream_error_mid_stream_is_an_error_event(transcript: str) -> None:
    with running_fake_upstream() as (_, root), running_proxy(f"{root}/v1") as proxy:
        events = parse(post(proxy, body(transcript)).content)
        assert violations(events, complete=False) == []
        assert events[-1]["type"] == "error"


def test_a_stream_cut_mid_tool_use_is_an_error_not_an_end_turn() -> None:
    call = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"pa'},
    }
    pieces = [
        http_head(),
        http_chunk(delta_chunk({"content": "reading"})),
        http_chunk(delta_chunk({"tool_calls": [call]})),
    ]
    with raw_upstream(Reply(pieces, end="close")) as fake, running_proxy(f"{fake.url}/v1") as proxy:
        events = parse(post(proxy, body("m")).content)
        assert violations(events, complete=False) == []
        assert not any(e["type"] == "message_delta" for e in events)


def test_pings_while_the_upstream_is_silent() -> None:
    pieces = chunked(
        "text/event-stream", [delta_chunk({"content": "late"}, "stop"), b"data: [DONE]\n\n"]
    )
    slow = Reply(pieces, pause=0.7)  # head, then 0.7 s of silence after each piece
    quick = {"server.keepalive_seconds": 0.2}
    with raw_upstream(slow) as fake, running_proxy(f"{fake.url}/v1", **quick) as proxy:
        events = parse(post(proxy, body("m")).content)
        assert violations(events) == []
        assert any(e["type"] == "ping" for e in events)


def test_refused_requests_in_anthropics_shape() -> None:
    with running_fake_upstream() as (fake, root), running_proxy(f"{root}/v1") as proxy:
        answer = post(proxy, {"model": "m", "messages": []})
        assert answer.status_code == 400
        assert answer.json()["error"]["type"] == "invalid_request_error"
        assert not fake.requests


def test_the_forwarded_chat_request() -> None:
    """What the upstream receives for a Claude Code-like request."""
    with running_fake_upstream() as (fake, root), running_proxy(f"{root}/v1") as proxy:
        payload = body(
            "openai_text_usage_only_last_chunk",
            system=[
                {
                    "type": "text",
                    "text": "You are Claude Code.",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
            thinking={"type": "adaptive"},
            output_config={"effort": "high"},
            metadata={"user_id": "user_1"},
        )
        payload["messages"].append({"role": "system", "content": "env"})
        headers = {
            **HEADERS,
            "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
        }
        answer = httpx.post(
            f"{proxy}/v1/messages?beta=true", json=payload, headers=headers, timeout=30
        )
        assert answer.status_code == 200
        sent = fake.requests[-1]
        assert sent.path.endswith("/chat/completions")
        chat = sent.json
        # The mark goes where OpenRouter reads it: on the system prompt's text part.
        assert chat["messages"][0] == {
            "role": "system",
            "content": [
                {
                    "type": "text",
                    "text": "You are Claude Code.",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        }
        assert chat["reasoning_effort"] == "high"
        assert chat["user"] == "user_1"
        assert chat["stream_options"] == {"include_usage": True}
        assert sent.headers.get("authorization") == "Bearer k"
        assert "x-api-key" not in sent.headers and "anthropic-beta" not in sent.headers


def test_record_then_replay_a_messages_exchange(tmp_path: Path) -> None:
    """A Messages exchange records the chat request that went upstream and its answer; replayed
    (the upstream gone), the same Messages request gets the same events. Message ids and
    signatures are minted per answer, so they are left out of the comparison."""

    def seen(proxy: str) -> list[Any]:
        out = []
        for transcript in ("gemini_indexless_call_stop", "vllm_gemma4_missing_id_name"):
            for stream in (True, False):
                answer = post(proxy, body(transcript, stream=stream))
                out.append((answer.status_code, _stable(answer)))
        # Reasoning, streamed only (the transcript has no non-streamed answer).
        answer = post(proxy, body("openrouter_reasoning_and_reasoning_content"))
        out.append((answer.status_code, _stable(answer)))
        return out

    with running_fake_upstream() as (fake, root):
        with running_proxy(f"{root}/v1", **{"recording.record_dir": str(tmp_path)}) as proxy:
            live = seen(proxy)
        sent = len(fake.requests)
    with running_proxy(f"{root}/v1", **{"recording.replay_dir": str(tmp_path)}) as proxy:
        replayed = seen(proxy)
    assert len(fake.requests) == sent
    assert [status for status, _ in live] == [200] * 5
    assert replayed == live
    # `streamfix replay`: each client's request through the Messages door again, answered from
    # its cassette, gets what the client was sent (its pings and minted ids aside).
    results = asyncio.run(check_directory(tmp_path, Settings()))
    assert len(results) == 5
    assert [(r.name, r.diff, r.violations) for r in results if not r.ok] == []


def _stable(answer: httpx.Response) -> Any:
    """The answer without what is minted per answer (message id, thinking signature)."""
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        events = parse(answer.content)
    else:
        events = [answer.json()]
    text = json.dumps(events)
    for event in events:
        message = event.get("message", event)
        if isinstance(message, dict) and isinstance(message.get("id"), str):
            text = text.replace(message["id"], "MSG")
    return json.loads(re.sub(r'"signature": "[^"]+"', '"signature": "SIG"', text))


def test_a_request_over_the_size_limit_is_refused_naming_the_limit() -> None:
    """Claude Code's system prompt and tool list are long; past the limit the answer says which."""
    with (
        running_fake_upstream() as (fake, root),
        running_proxy(f"{root}/v1", **{"server.max_request_bytes": 2000}) as proxy,
    ):
        answer = post(proxy, body("m", system="x" * 5000))
        assert answer.status_code == 413
        assert answer.json()["error"]["type"] == "request_too_large"
        assert "2000" in answer.json()["error"]["message"]
        assert not fake.requests


def test_a_whole_answer_to_a_streamed_request_still_goes_out_as_events() -> None:
    completion = {
        "id": "c1",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    pieces = chunked("application/json", [json.dumps(completion).encode()])
    with raw_upstream(Reply(pieces)) as fake, running_proxy(f"{fake.url}/v1") as proxy:
        answer = post(proxy, body("m"))
        assert answer.headers["content-type"].startswith("text/event-stream")
        events = parse(answer.content)
        assert violations(events) == []
        deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
        assert deltas == [{"type": "text_delta", "text": "hi"}]
        assert events[-2]["usage"] == {"input_tokens": 3, "output_tokens": 1}


def test_a_parameter_the_upstream_refuses_is_learned_and_the_request_sent_again() -> None:
    """An upstream that refuses `top_k` (OpenAI's own 400): the chat path's refusal learning
    drops it and sends the Messages request's chat request once more; the next one goes
    without it from the start."""
    fake = RejectingUpstream({"top_k": openai_unknown_parameter("top_k")})
    with running_rejecting_upstream(fake) as url, running_proxy(url) as proxy:
        for _ in range(2):
            answer = post(proxy, body("m", top_k=5))
            assert answer.status_code == 200
            assert violations(parse(answer.content)) == []
        assert ["top_k" in b for b in fake.bodies()] == [True, False, False]


def test_anthropic_beta_features_are_read_from_the_clients_headers() -> None:
    """The table applies to what the client sent (the upstream never gets the header): a
    feature that needs Anthropic's servers is refused before anything goes upstream, one in
    neither list is counted."""
    with running_fake_upstream() as (fake, root), running_proxy(f"{root}/v1") as proxy:

        def with_beta(feature: str) -> httpx.Response:
            headers = {**HEADERS, "anthropic-beta": feature}
            payload = body("openai_text_usage_only_last_chunk")
            return httpx.post(f"{proxy}/v1/messages", json=payload, headers=headers, timeout=30)

        refused = with_beta("code-execution-2025-05-22")
        assert refused.status_code == 400
        assert "code-execution-2025-05-22" in refused.json()["error"]["message"]
        assert not fake.requests
        unknown = with_beta("brand-new-feature-2031-01-01")
        assert unknown.status_code == 200
        assert "anthropic_beta_unknown:1" in unknown.headers["x-streamfix-repairs"]
        assert "anthropic-beta" not in fake.requests[-1].headers
