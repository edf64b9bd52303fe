"""Claude Code 2.1.332's side requests through the Messages front, beside its main tool
exchange, with non-essential traffic left on (shared/MESSAGES.md says what it sends when):

- `POST /v1/messages/count_tokens` with the main model, when its Read tool reads a file whose
  rough size passes a quarter of Read's token limit: the count decides whether the file fits.
  The proxy answers a count of its own (`x-streamfix-token-count`: `estimate`, or `learned`
  once an answer from that upstream and model taught it); the upstream gets none.
- The small fast model (`ANTHROPIC_SMALL_FAST_MODEL`): a tool-use summary after each tool
  batch (`CLAUDE_CODE_EMIT_TOOL_USE_SUMMARIES=1`, which Agent SDK hosts set), and a session
  title when a host asks for one over stream-json input (the `generate_session_title` control
  request the SDK's `generateSessionTitle` sends). The title request asks for structured output
  (`output_config.format`, a JSON schema): the upstream must get it as `response_format`, or it
  answers prose and the title comes back null.
- `HEAD /api/hello` on the base URL, a connection warm-up whose answer Claude Code ignores.

Its quota probe (`max_tokens: 1`, content "quota") is sent only with a claude.ai subscription's
OAuth login (or a Claude gateway token), never with an API key, so it cannot be exercised here.

The upstream is a Gemini-like fake (signatures required back) that answers the small fast model
apart from the main script: JSON when the request carries a JSON schema, as a constrained model
writes, prose otherwise. Two user turns, each reading the big file and running `echo`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.clients.messages_node import claude_environment, ensure_installed, run_claude
from tests.support.gemini_upstream import TextStep, running_gemini_upstream, tool_step
from tests.support.proxies import running_proxy

MAIN = "gemini-3-flash-preview"
SIDE = "gemini-3.1-flash-lite-preview"
TITLE = "Big file echo"
SUMMARY = "Read big.txt, ran echo"
# About 40 kB: past a quarter of Read's 25,000-token limit by its rough estimate (so Claude Code
# counts), well under the limit by the proxy's estimate (so the read goes on).
BIG_LINE = "streamfix counts tokens for claude code's read tool, line {:05d}\n"
BIG_LINES = 640


def side_answer(body: dict[str, Any]) -> str:
    """The small fast model's answer: an object of the schema's required strings when the
    request constrains it to a JSON schema, a summary label otherwise."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        schema = response_format["json_schema"]["schema"]
        return json.dumps({name: TITLE for name in schema.get("required", [])})
    return SUMMARY


def exchanges(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The proxy's exchange log lines, their fields."""
    return [r.exchange for r in caplog.records if hasattr(r, "exchange")]


def tool_results(lines: list[dict[str, Any]]) -> list[str]:
    return [
        block["content"] if isinstance(block.get("content"), str) else json.dumps(block)
        for line in lines
        if line.get("type") == "user"
        for block in line["message"]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


def succeeded(lines: list[dict[str, Any]]) -> None:
    assert lines[-1]["type"] == "result" and lines[-1]["subtype"] == "success", lines[-1]
    assert not any(line.get("is_api_error_message") for line in lines), lines


def test_claude_code_side_requests_answered_beside_its_tool_exchange(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ensure_installed()
    big = tmp_path / "big.txt"
    big.write_text("".join(BIG_LINE.format(n) for n in range(BIG_LINES)))
    script = [
        tool_step(("Read", {"file_path": str(big)})),
        tool_step(("Bash", {"command": "echo streamfix-one", "description": "echo"})),
        TextStep("Done."),
    ]
    caplog.set_level(logging.INFO, "proxy")
    with (
        running_gemini_upstream(script, answers_by_model={SIDE: side_answer}) as (fake, root),
        running_proxy(f"{root}/v1beta/openai", **{"upstream.profile": "gemini"}) as proxy,
    ):
        environment = claude_environment(proxy, tmp_path, side_model=SIDE)
        environment["CLAUDE_CODE_EMIT_TOOL_USE_SUMMARIES"] = "1"
        host = [
            {"type": "user", "message": {"role": "user", "content": "Read big.txt, run echo."}},
            {
                "type": "control_request",
                "request_id": "title-1",
                "request": {"subtype": "generate_session_title", "description": "Read big.txt"},
            },
        ]
        first = run_claude(
            MAIN,
            tmp_path,
            environment,
            "--input-format",
            "stream-json",
            stdin="".join(json.dumps(line) + "\n" for line in host),
        )
        second = run_claude(MAIN, tmp_path, environment, "Once more.", "--continue")

        # The main exchange: both turns read the file whole and ran echo.
        for lines in (first, second):
            succeeded(lines)
            results = tool_results(lines)
            assert any(f"line {BIG_LINES - 1:05d}" in result for result in results), results
            assert any("streamfix-one" in result for result in results), results
        assert fake.rejections == 0
        main = [r.json for r in fake.requests if r.json["model"] == MAIN]
        assert len(main) == 6  # two turns of read, echo, answer

        # The small fast model's requests reached the upstream as themselves...
        side = [r.json for r in fake.requests if r.json["model"] == SIDE]
        titles = [body for body in side if "response_format" in body]
        summaries = [body for body in side if "response_format" not in body]
        assert len(titles) == 1 and "<session>" in json.dumps(titles[0]["messages"])
        assert titles[0]["response_format"]["json_schema"]["schema"]["required"] == ["title"]
        assert len(summaries) >= 2 and all("tools" not in body for body in summaries)
        assert all("summary label" in body["messages"][0]["content"] for body in summaries)
        # ... and their answers reached Claude Code: the title the host asked for, the labels.
        answered = [line for line in first if line.get("type") == "control_response"]
        assert answered[0]["response"]["response"] == {"title": TITLE}, answered
        labels = [line["summary"] for line in first + second if line["type"] == "tool_use_summary"]
        assert labels and set(labels) == {SUMMARY}, labels

        # The proxy's log lines: every exchange answered 200, the counts answered by the proxy
        # (the main model's, never forwarded), the side model's messages by the upstream...
        lines = exchanges(caplog)
        assert all(line["status"] == 200 for line in lines), lines
        counts = [line for line in lines if line["path"] == "/v1/messages/count_tokens"]
        assert len(counts) == 2 and {line["model"] for line in counts} == {MAIN}, counts
        messages = [line for line in lines if line["path"] == "/v1/messages"]
        assert sorted(line["model"] for line in messages) == sorted(
            r.json["model"] for r in fake.requests
        )
        # ... all through the one route the models map to, counts included: booked under
        # route "-" (the refusals' name), a count would be missing from its route's metrics.
        assert {line["route"] for line in lines} == {"default"}, counts
