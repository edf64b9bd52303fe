"""Claude Code 2.1.332 as it really runs, headless and offline, through the proxy's Messages door
against a chat upstream that answers only `POST /v1/chat/completions` with no query string and
refuses what real upstreams refuse (tests/support/claude_code_upstream.py).

One session (`claude -p`, stream-json in and out, a host asking for a session title), and what
it must show, each in a test of its own:

- every request reached the upstream on its exact path: Claude Code sends `POST
  /v1/messages?beta=true`, and the query is the door's, not the upstream's (Google's front end
  refuses `beta` with a 400);
- 1. a tool loop with a PDF read: Claude Code's Read tool on a small real PDF sends the file
  back as a `document` block in its `tool_result`; the upstream must get it as a chat `file`
  part holding the file's bytes, and answers only then that it has it;
- 2. a structured side request and a forced tool choice learned: the host's session title is
  Claude Code's structured-output side request (`output_config.format`) and its answer must
  come back. Claude Code 2.1.332 never sends a forced `tool_choice` to this upstream: its
  request builder turns `{"type": "tool"}` into `auto` whenever thinking is on ("tool_choice
  {type:'tool', name:'web_search'} demoted to auto: extended thinking is active", even with
  CLAUDE_CODE_DISABLE_THINKING=1 for a model it does not know), and its one forced choice,
  WebSearch's, carries Anthropic's server tool `web_search_20250305`, which the door refuses.
  So the forced choice comes from a Messages client that sends one, anthropic-python, on the
  same proxy and upstream after the session: the upstream refuses it once (DeepSeek's 400 for
  a forced choice while it thinks), and the proxy learns it: the client never sees the
  refusal, and the next such request goes up already as the upstream takes it;
- 3. a compaction-sized context read right: the upstream reports 150,000 prompt tokens on
  every answer (of a 200,000 window); Claude Code's own output must say so: each assistant
  line's usage is what `message_start` said, the result's per-model input tokens the sum of
  what each `message_delta` said.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.clients.messages_node import claude_environment, ensure_installed, run_claude
from tests.support.claude_code_upstream import (
    FORCED_TOOL_MESSAGE,
    PDF_ANSWER,
    Playbook,
    SessionUpstream,
    file_parts,
    forced_tool,
    has_tool_result,
    running_session_upstream,
)
from tests.support.proxies import running_proxy
from tests.support.scripted_chat_upstream import CHAT_PATH

MAIN = "streamfix-main"
SIDE = "streamfix-side"
TITLE = "Reading a PDF"
PROMPT_TOKENS = 150_000
WINDOW = 200_000
PDF_TEXT = "streamfix reads this pdf"
FORCED_TOOL: anthropic.types.ToolParam = {
    "name": "record_title",
    "description": "Record the session's title.",
    "input_schema": {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
    },
}


def tiny_pdf(text: str) -> bytes:
    """A valid one-page PDF showing `text`: catalog, pages, page, content stream, font, and a
    cross-reference table whose offsets are the objects' own."""
    stream = f"BT /F1 12 Tf 20 50 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 100] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


@dataclass
class Run:
    fake: SessionUpstream
    pdf: Path
    lines: list[dict[str, Any]]
    """Claude Code's stream-json output."""
    session: int
    """How many of the upstream's requests were the session's (the rest are anthropic-python's)."""
    forced: list[anthropic.types.Message | anthropic.APIError]
    """What anthropic-python got for each forced-tool request, after the session."""


def forced_side_request(proxy: str) -> anthropic.types.Message | anthropic.APIError:
    client = anthropic.Anthropic(base_url=proxy, api_key="dummy-key", max_retries=0, timeout=30)
    try:
        return client.messages.create(
            model=SIDE,
            max_tokens=256,
            tools=[FORCED_TOOL],
            tool_choice={"type": "tool", "name": FORCED_TOOL["name"]},
            messages=[{"role": "user", "content": "Name this session."}],
        )
    except anthropic.APIError as exc:
        return exc


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    ensure_installed()
    home = tmp_path_factory.mktemp("claude-real-run")
    pdf = home / "streamfix.pdf"
    pdf.write_bytes(tiny_pdf(PDF_TEXT))
    playbook = Playbook(MAIN, SIDE, str(pdf), pdf.read_bytes(), TITLE, PROMPT_TOKENS)
    with (
        running_session_upstream(playbook) as (fake, root),
        running_proxy(f"{root}/v1") as proxy,
    ):
        environment = claude_environment(proxy, home, side_model=SIDE)
        # Claude Code gives a model it does not know a 1,000,000-token window; at 200,000 (it
        # compacts past 180,000 less its buffer) the upstream's 150,000 is a context near it.
        environment["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(WINDOW)
        host = [
            {
                "type": "user",
                "message": {"role": "user", "content": "What does streamfix.pdf say?"},
            },
            {
                "type": "control_request",
                "request_id": "title-1",
                "request": {"subtype": "generate_session_title", "description": "Read a PDF"},
            },
        ]
        lines = run_claude(
            MAIN,
            home,
            environment,
            "--input-format",
            "stream-json",
            stdin="".join(json.dumps(line) + "\n" for line in host),
        )
        session = len(fake.seen)
        forced = [forced_side_request(proxy) for _ in range(2)]
        yield Run(fake, pdf, lines, session, forced)


def result_of(run: Run) -> dict[str, Any]:
    results = [line for line in run.lines if line.get("type") == "result"]
    assert results, f"Claude Code wrote no result line: {run.lines[-3:]}"
    return results[-1]


def api_errors(run: Run) -> list[Any]:
    """The API errors Claude Code showed, as it wrote them."""
    return [
        line["message"]["content"]
        for line in run.lines
        if line.get("type") == "assistant" and line.get("is_api_error_message")
    ]


def summary(run: Run) -> str:
    seen = [
        f"{s.request.method} {s.request.path}{'?' + s.request.query if s.request.query else ''}"
        f" {s.model} -> {s.status}{': ' + s.refused if s.refused else ''}"
        for s in run.fake.seen
    ]
    return f"upstream saw {seen}; Claude Code's API errors {api_errors(run)}"


def test_every_request_reached_the_upstream_on_its_exact_path(run: Run) -> None:
    seen = run.fake.seen
    assert seen[: run.session], f"no request of the session reached the upstream: {summary(run)}"
    with_query = [s.request.query for s in seen if s.request.query]
    assert not with_query, (
        f"the Messages door passed its query string on ({with_query}): the upstream's own path "
        f"takes none, and Google's front end refuses `beta` with a 400. {summary(run)}"
    )
    elsewhere = [
        (s.request.method, s.request.path)
        for s in seen
        if (s.request.method, s.request.path) != ("POST", CHAT_PATH)
    ]
    assert not elsewhere, f"requests went to other paths: {elsewhere}. {summary(run)}"


def test_1_the_pdf_claude_code_reads_reaches_the_upstream_as_a_file_part(run: Run) -> None:
    reads = [
        block
        for line in run.lines
        if line.get("type") == "assistant"
        for block in line["message"]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_use" and block["name"] == "Read"
    ]
    assert reads and reads[0]["input"]["file_path"] == str(run.pdf), (
        f"Claude Code did not run Read on the PDF: {summary(run)}"
    )
    after_read = [s for s in run.fake.seen if s.model == MAIN and has_tool_result(s.request.json)]
    assert after_read, (
        f"the request carrying Read's result (a `document` block inside `tool_result`) never "
        f"reached the upstream: {summary(run)}"
    )
    parts = [part for s in after_read for part in file_parts(s.request.json)]
    assert any(run.fake.pdf_arrived(part) for part in parts), (
        "the PDF did not reach the upstream as a chat file part holding the file's bytes "
        '({"type": "file", "file": {"filename": ..., "file_data": '
        '"data:application/pdf;base64,..."}}); '
        f"file parts seen: {parts}. {summary(run)}"
    )
    result = result_of(run)
    assert result["subtype"] == "success" and PDF_ANSWER in str(result.get("result")), (
        f"Claude Code did not end with the upstream's answer on the PDF: {result}"
    )


def test_2_structured_side_request_answered_and_forced_tool_choice_learned(run: Run) -> None:
    # Claude Code's structured-output side request: the session title the host asked for.
    titles = [
        s for s in run.fake.answered(SIDE) if "<session>" in json.dumps(s.request.json["messages"])
    ]
    answered = [line for line in run.lines if line.get("type") == "control_response"]
    assert titles and answered and answered[0]["response"].get("response") == {"title": TITLE}, (
        f"the session title did not come back from the upstream: {answered}. {summary(run)}"
    )
    # Claude Code itself forces no tool (the module docstring says why): if it ever does, this
    # test should drive that request instead of anthropic-python's.
    claude_forced = [
        s.request.json.get("tool_choice")
        for s in run.fake.seen[: run.session]
        if isinstance(s.request.json, dict) and forced_tool(s.request.json) is not None
    ]
    assert not claude_forced, f"Claude Code now forces a tool: {claude_forced}"

    # The forced choice, sent twice by a Messages client: refused once, learned.
    failed = [got for got in run.forced if isinstance(got, anthropic.APIError)]
    assert not failed, (
        "the client saw the upstream's refusal of a forced tool choice while thinking: the "
        f"proxy did not send it once more as the upstream takes it: {failed}. {summary(run)}"
    )
    calls = [
        [block.input for block in got.content if block.type == "tool_use"]
        for got in run.forced
        if isinstance(got, anthropic.types.Message)
    ]
    assert calls == [[{"title": TITLE}]] * 2, f"each forced request gets its call: {calls}"
    refusals = run.fake.refused(FORCED_TOOL_MESSAGE)
    assert len(refusals) == 1, (
        f"the upstream refused the forced tool choice {len(refusals)} times, not once: the "
        f"proxy did not learn it from the first refusal. {summary(run)}"
    )
    forced_exchanges = run.fake.seen[run.session :]
    assert len(forced_exchanges) == 3, (
        f"two forced requests should reach the upstream three times (the first refused and "
        f"sent once more, the second as learned): {summary(run)}"
    )


def test_3_claude_code_reads_the_context_the_upstream_reported(run: Run) -> None:
    main = run.fake.answered(MAIN)
    assert main, f"no request of Claude Code's main model was answered: {summary(run)}"
    starts = [
        line["message"]["usage"].get("input_tokens")
        for line in run.lines
        if line.get("type") == "assistant"
        and line["message"].get("model") == MAIN
        and not line.get("is_api_error_message")
    ]
    # `message_start` goes out before the upstream has said anything (Anthropic's order puts
    # it first): its input tokens are the door's estimate, never 0; what the upstream reported
    # comes in `message_delta`, which is what Claude Code's counts settle on (below).
    assert starts and all(isinstance(n, int) and n > 0 for n in starts), (
        f"Claude Code's assistant lines read input tokens {starts} (their `message_start`): "
        "an estimate of the request was due, never 0"
    )
    result = result_of(run)
    usage = result.get("modelUsage", {}).get(MAIN, {})
    assert usage.get("contextWindow") == WINDOW, f"not the window this test sets: {usage}"
    read = usage.get("inputTokens")
    assert read == PROMPT_TOKENS * len(main), (
        f"Claude Code's result counts {read} input tokens for {MAIN}, not {PROMPT_TOKENS} for "
        f"each of the {len(main)} answers (their `message_delta`): {result.get('modelUsage')}"
    )
