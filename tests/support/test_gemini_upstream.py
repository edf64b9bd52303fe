"""The Gemini fake itself (tests/support/gemini_upstream.py), without the proxy: it enforces the
thought-signature rule (PROTOCOL.md §1.2) with Gemini's 400, streams the way Gemini does, and
keeps its call ids fixed.
"""

from __future__ import annotations

import json

from tests.support.gemini_upstream import (
    CORRUPTED_SIGNATURE_MESSAGE,
    DUMMY_SIGNATURE,
    THREE_STEPS,
    missing_signature_message,
    running_gemini_upstream,
    signature_of,
)
from tests.support.signature_flows import (
    FINAL_TEXT,
    MODEL,
    post_chat,
    without_extra_content,
)


def test_fake_enforces_the_signature_rule_without_proxy() -> None:
    with running_gemini_upstream(THREE_STEPS) as (fake, root):
        base = f"{root}/v1beta/openai"
        user = {"role": "user", "content": "read a.txt"}
        first = post_chat(base, {"model": MODEL, "messages": [user]})
        assert first.status_code == 200, first.text
        message = first.json()["choices"][0]["message"]
        assert first.json()["choices"][0]["finish_reason"] == "tool_calls"
        (call,) = message["tool_calls"]
        assert signature_of(call) == fake.issued[call["id"]]
        result = {"role": "tool", "tool_call_id": call["id"], "content": "hello"}

        # Dropped signature: Gemini's 400, naming the call and its position.
        unsigned = {"role": "assistant", "tool_calls": [without_extra_content(call)]}
        response = post_chat(base, {"model": MODEL, "messages": [user, unsigned, result]})
        assert response.status_code == 400
        assert response.json() == [
            {
                "error": {
                    "code": 400,
                    "message": missing_signature_message("read_file", 2),
                    "status": "INVALID_ARGUMENT",
                }
            }
        ]
        assert fake.rejections == 1

        # Another call's signature, or one never issued: corrupted.
        for wrong in ("bm90IGlzc3VlZA==", "x" + fake.issued[call["id"]]):
            forged = {
                "role": "assistant",
                "tool_calls": [{**call, "extra_content": {"google": {"thought_signature": wrong}}}],
            }
            response = post_chat(base, {"model": MODEL, "messages": [user, forged, result]})
            assert response.status_code == 400
            assert response.json()[0]["error"]["message"] == CORRUPTED_SIGNATURE_MESSAGE

        # Another credential's signature: corrupted too (signatures are bound to the client).
        response = post_chat(
            base, {"model": MODEL, "messages": [user, message, result]}, key="other"
        )
        assert response.status_code == 400
        assert response.json()[0]["error"]["message"] == CORRUPTED_SIGNATURE_MESSAGE

        # The dummy is accepted; so is the signature sent back where it was received.
        dummy = {
            "role": "assistant",
            "tool_calls": [
                {**call, "extra_content": {"google": {"thought_signature": DUMMY_SIGNATURE}}}
            ],
        }
        assert (
            post_chat(base, {"model": MODEL, "messages": [user, dummy, result]}).status_code == 200
        )
        ok = post_chat(base, {"model": MODEL, "messages": [user, message, result]})
        assert ok.status_code == 200, ok.text
        parallel = ok.json()["choices"][0]["message"]["tool_calls"]
        assert [c["function"]["name"] for c in parallel] == ["read_file", "list_dir"]
        assert signature_of(parallel[0]) == fake.issued[parallel[0]["id"]]
        assert "extra_content" not in parallel[1]

        # An older turn is not validated: a new user message makes the unsigned step history.
        later = [user, unsigned, result, {"role": "assistant", "content": "done"}, user]
        assert post_chat(base, {"model": MODEL, "messages": later}).status_code == 200
        assert fake.rejections == 4


def test_fake_streams_like_gemini() -> None:
    with running_gemini_upstream(THREE_STEPS) as (fake, root):
        base = f"{root}/v1beta/openai"
        user = {"role": "user", "content": "go"}
        # A forged history that reaches step 1 (the dummy passes) gets the parallel batch.
        dummy = {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "elsewhere",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                    "extra_content": {"google": {"thought_signature": DUMMY_SIGNATURE}},
                }
            ],
        }
        result = {"role": "tool", "tool_call_id": "elsewhere", "content": "x"}
        body = {"model": MODEL, "stream": True, "messages": [user, dummy, result]}
        response = post_chat(base, body)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [e for e in response.text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
        calls = [c for ch in chunks for c in ch["choices"][0]["delta"].get("tool_calls", [])]
        assert len(calls) == 2
        assert all("index" not in c for c in calls)
        assert signature_of(calls[0]) == fake.issued[calls[0]["id"]]
        assert "extra_content" not in calls[1]
        assert all(ch["choices"][0]["delta"].get("role") == "assistant" for ch in chunks)
        assert [ch["choices"][0].get("finish_reason") for ch in chunks] == [None, None, "stop"]
        assert "finish_reason" not in chunks[0]["choices"][0]
        assert "usage" in chunks[1]

        # Text: signed on a last delta with content null.
        body["messages"] += [
            {"role": "assistant", "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c["id"], "content": "x"} for c in calls),
        ]
        response = post_chat(base, body)
        chunks = [json.loads(e[6:]) for e in response.text.split("\n\n") if e and e[6:] != "[DONE]"]
        text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks)
        assert text == FINAL_TEXT["three-step"]
        last = chunks[-1]["choices"][0]
        assert last["delta"]["content"] is None
        assert signature_of(last["delta"]) == fake.text_signatures[text]
        assert last["finish_reason"] == "stop"


def test_fake_fixed_ids() -> None:
    def ids(step: int, position: int) -> str:
        return f"fixed-{step}-{position}"

    with running_gemini_upstream(THREE_STEPS, fixed_ids=ids) as (fake, root):
        base = f"{root}/v1beta/openai"
        body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}]}
        one = post_chat(base, body, key="k1").json()["choices"][0]["message"]["tool_calls"][0]
        two = post_chat(base, body, key="k2").json()["choices"][0]["message"]["tool_calls"][0]
        assert one["id"] == two["id"] == "fixed-0-0"
        assert signature_of(one) != signature_of(two)
        assert fake.signature_for("fixed-0-0", "Bearer k1") == signature_of(one)
        assert fake.signature_for("fixed-0-0", "Bearer k2") == signature_of(two)
