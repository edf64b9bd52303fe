"""The DeepSeek and OpenRouter fakes themselves (tests/support/reasoning_upstreams.py), without
the proxy: each enforces its provider's rule (PROTOCOL.md §1.5 and §1.7) and streams the way
that provider does. DeepSeek rejects a tool-calling assistant message without the exact
`reasoning_content` it issued for it, OpenRouter an assistant message it answered without the
exact `reasoning_details` array.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import httpx

from tests.support.reasoning_flows import (
    DEEPSEEK,
    FINAL_TEXTS,
    OPENROUTER,
    post_chat,
    rejection_reasons,
    tool_results_for,
    without_reasoning,
)
from tests.support.reasoning_upstreams import (
    OPENROUTER_MISSING_MESSAGE,
    TextStep,
    running_deepseek_upstream,
    running_openrouter_upstream,
)


def test_deepseek_fake_enforces_its_rule() -> None:
    with running_deepseek_upstream() as (fake, root):
        base = f"{root}/v1"
        user = {"role": "user", "content": "read a.txt"}
        first = post_chat(base, {"model": DEEPSEEK.model, "messages": [user]})
        assert first.status_code == 200, first.text
        (choice,) = first.json()["choices"]
        assert choice["finish_reason"] == "tool_calls"
        message = choice["message"]
        (call,) = message["tool_calls"]
        assert re.fullmatch(r"call_00_[A-Za-z0-9]{24}", call["id"])
        assert message["reasoning_content"] == fake.receipt_for([call["id"]]) != ""

        def ask(history: list[dict[str, Any]], key: str = "k") -> httpx.Response:
            return post_chat(base, {"model": DEEPSEEK.model, "messages": history}, key)

        # Dropped: DeepSeek's 400, word for word.
        response = ask([user, without_reasoning(message), *tool_results_for(message)])
        assert response.status_code == 400
        assert response.json() == {
            "error": {
                "message": "The reasoning_content in the thinking mode must be passed back to "
                "the API.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        }
        # Altered, empty, or another credential's: rejected too.
        altered = {**message, "reasoning_content": message["reasoning_content"] + " "}
        assert ask([user, altered, *tool_results_for(message)]).status_code == 400
        emptied = {**message, "reasoning_content": ""}
        assert ask([user, emptied, *tool_results_for(message)]).status_code == 400
        assert ask([user, message, *tool_results_for(message)], key="other").status_code == 400
        assert rejection_reasons(fake) == ["missing", "altered", "altered", "unknown"]

        # Sent back exactly: accepted; the next step is the parallel batch.
        ok = ask([user, message, *tool_results_for(message)])
        assert ok.status_code == 200, ok.text
        parallel = ok.json()["choices"][0]["message"]
        assert [c["function"]["name"] for c in parallel["tool_calls"]] == ["read_file", "list_dir"]
        assert [c["id"][:8] for c in parallel["tool_calls"]] == ["call_00_", "call_01_"]

        # Text turns: their reasoning is ignored (absent, or anything at all).
        history = [user, message, *tool_results_for(message), parallel, *tool_results_for(parallel)]
        text = ask(history).json()["choices"][0]["message"]
        assert text["content"] == FINAL_TEXTS[0]
        assert text["reasoning_content"]
        for variant in (without_reasoning(text), {**text, "reasoning_content": "made up"}):
            later = [*history, variant, {"role": "user", "content": "now read c.txt"}]
            assert ask(later).status_code == 200
        # A tool turn is checked in every later request, also after a new user question.
        later = [
            user,
            without_reasoning(message),
            *tool_results_for(message),
            text,
            {"role": "user", "content": "?"},
        ]
        assert ask(later).status_code == 400
        assert len(fake.rejections) == 5


def test_deepseek_fake_takes_json_mode_with_the_word_and_refuses_a_schema() -> None:
    """DeepSeek's response formats, its bodies as the reports quote them byte for byte."""
    schema = {"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object"}}}
    ask = {"role": "user", "content": "Name this session."}
    with running_deepseek_upstream(script=[[TextStep('{"title": "A"}')]]) as (fake, root):
        base = f"{root}/v1"
        refused = post_chat(base, {"model": "m", "messages": [ask], "response_format": schema})
        assert refused.status_code == 400
        assert refused.content == (
            b'{"error":{"message":"This response_format type is unavailable now",'
            b'"type":"invalid_request_error","param":null,"code":"invalid_request_error"}}'
        )
        json_mode = {"type": "json_object"}
        unsaid = post_chat(base, {"model": "m", "messages": [ask], "response_format": json_mode})
        assert unsaid.status_code == 400
        assert unsaid.json()["error"]["message"] == (
            "Prompt must contain the word 'json' in some form to use 'response_format' of "
            "type 'json_object'."
        )
        said = {"role": "system", "content": "Answer in JSON."}
        taken = post_chat(
            base, {"model": "m", "messages": [said, ask], "response_format": json_mode}
        )
        assert taken.status_code == 200, taken.text
        assert json.loads(taken.json()["choices"][0]["message"]["content"]) == {"title": "A"}
        assert [status for status, _ in fake.responses] == [400, 400, 200]


def test_deepseek_fake_streams_like_deepseek() -> None:
    with running_deepseek_upstream(min_pieces=4) as (fake, root):
        body = {
            "model": DEEPSEEK.model,
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
        }
        response = post_chat(f"{root}/v1", body)
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [e for e in response.text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        chunks = [json.loads(e.removeprefix("data: "))["choices"][0] for e in events[:-1]]
        assert chunks[0]["delta"] == {"role": "assistant", "content": None, "reasoning_content": ""}
        pieces = [
            c["delta"]["reasoning_content"] for c in chunks if "reasoning_content" in c["delta"]
        ]
        pieces = [p for p in pieces if p is not None]
        (issued,) = fake.issued_log
        assert len(pieces) == 5 and pieces == list(issued.pieces)
        assert "".join(pieces) == issued.receipt
        entries = [e for c in chunks for e in c["delta"].get("tool_calls", [])]
        assert entries[0]["id"] == issued.call_ids[0] and entries[0]["index"] == 0
        assert all(set(e) == {"index", "function"} for e in entries[1:])
        arguments = "".join(e["function"]["arguments"] for e in entries)
        assert json.loads(arguments) == {"path": "a.txt"}
        assert [c["finish_reason"] for c in chunks].count("tool_calls") == 1
        # Reasoning comes strictly before the calls.
        first_call = next(n for n, c in enumerate(chunks) if "tool_calls" in c["delta"])
        assert all(not c["delta"].get("reasoning_content") for c in chunks[first_call:])


def test_openrouter_fake_enforces_its_rule() -> None:
    with running_openrouter_upstream() as (fake, root):
        base = f"{root}/api/v1"
        model = OPENROUTER.model
        user = {"role": "user", "content": "read a.txt"}
        first = post_chat(base, {"model": model, "messages": [user]})
        assert first.status_code == 200, first.text
        message = first.json()["choices"][0]["message"]
        details = message["reasoning_details"]
        assert [(d["type"], d["index"], d["format"]) for d in details] == [
            ("reasoning.text", 0, "google-gemini-v1"),
            ("reasoning.encrypted", 1, "google-gemini-v1"),
        ]
        assert details == fake.receipt_for([message["tool_calls"][0]["id"]])

        def ask(history: list[dict[str, Any]], key: str = "k") -> httpx.Response:
            return post_chat(base, {"model": model, "messages": history}, key)

        response = ask([user, without_reasoning(message), *tool_results_for(message)])
        assert response.status_code == 400
        assert response.json() == {"error": {"message": OPENROUTER_MISSING_MESSAGE, "code": 400}}
        assert response.json()["error"]["message"].startswith(
            "Gemini models require OpenRouter reasoning details to be preserved in each request."
        )
        reordered = {**message, "reasoning_details": details[::-1]}
        changed = copy.deepcopy(message)
        changed["reasoning_details"][1]["data"] = "x" + details[1]["data"]
        dropped = {**message, "reasoning_details": details[:1]}
        for wrong in (reordered, changed, dropped):
            response = ask([user, wrong, *tool_results_for(message)])
            assert response.status_code == 400
            assert "Corrupted thought signature." in response.json()["error"]["metadata"]["raw"]
        assert ask([user, message, *tool_results_for(message)], key="other").status_code == 400
        assert rejection_reasons(fake) == ["missing", "altered", "altered", "altered", "unknown"]

        ok = ask([user, message, *tool_results_for(message)])
        assert ok.status_code == 200, ok.text
        parallel = ok.json()["choices"][0]["message"]
        history = [user, message, *tool_results_for(message), parallel, *tool_results_for(parallel)]
        text = ask(history).json()["choices"][0]["message"]
        assert text["content"] == FINAL_TEXTS[0]
        # Text answers carry details too, and need them back.
        later = [*history, without_reasoning(text), {"role": "user", "content": "now read c.txt"}]
        assert ask(later).status_code == 400
        later[-2] = text
        assert ask(later).status_code == 200
        # An assistant message the fake never answered needs nothing.
        foreign = {"role": "assistant", "content": "Hi, how can I help?"}
        assert ask([user, foreign, {"role": "user", "content": "x"}]).status_code == 200


def test_openrouter_fake_streams_pieces_that_merge_into_the_array() -> None:
    with running_openrouter_upstream() as (fake, root):
        body = {
            "model": OPENROUTER.model,
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
        }
        response = post_chat(f"{root}/api/v1", body)
        assert response.text.startswith(": OPENROUTER PROCESSING\n\n")
        events = [e for e in response.text.split("\n\n") if e.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        deltas = [json.loads(e[6:])["choices"][0]["delta"] for e in events[:-1]]
        pieces = [d["reasoning_details"] for d in deltas if "reasoning_details" in d]
        (issued,) = fake.issued_log
        assert pieces == list(issued.pieces)
        text_pieces = [p for (p,) in pieces if p["index"] == 0]
        assert 2 <= len(text_pieces) <= 3
        assert "id" in text_pieces[0] and all("id" not in p for p in text_pieces[1:])
        merged_text = "".join(p["text"] for p in text_pieces)
        assert merged_text == issued.receipt[0]["text"] == issued.reasoning
        assert "".join(d.get("reasoning") or "" for d in deltas) == issued.reasoning
        # The encrypted entry rides on the first tool call's delta.
        (with_call,) = [d for d in deltas if "tool_calls" in d]
        assert with_call["reasoning_details"] == [issued.receipt[1]]
        assert all(d.get("role") == "assistant" for d in deltas)
