"""The replay corpus in recordings/ and `streamfix replay` (proxy/replay_check.py), through the
command line as CI runs it.

- The corpus: `streamfix replay recordings` exits 0 with every cassette ok; every cassette made
  from a transcript carries the transcript's expected calls (so the corpus pins right answers,
  not just today's); the README lists every cassette; error cassettes keep status, headers and
  body.
- `streamfix replay` fails on a changed repair or an edited client output, with a diff, and
  passes after `--update`; it reports rule violations.
- A front client's cassette replays the client's own request through its door.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.repair.conformance import violations
from proxy.upstream.cassettes import Cassette
from tests.explain.front_recordings import GEMINI, MESSAGES_TOOLS, QUESTION, anthropic_client
from tests.support.fake_upstream import (
    load_transcript,
    running_fake_upstream,
    transcript_names,
    wire_transcript_names,
)
from tests.support.make_recordings import CASES
from tests.support.proxies import running_proxy
from tests.support.recording_clients import (
    RECORDINGS,
    ROOT,
    raw_stream,
    upstream_bytes,
)
from tests.support.streams import assembled_calls, content, finish_reasons
from tests.support.waiting import wait_until

CORPUS = sorted(RECORDINGS.glob("*.json"))

# The behaviours the corpus must hold, by cassette name.
REQUIRED = {
    "gemini_indexless_call_stop",
    "gemini_parallel_one_per_chunk",
    "gemini_signature_only_delta",
    "gemini_text_thought_signature",
    "vertex_jumping_index",
    "vllm_canonical_incremental",
    "vllm_gemma4_missing_id_name",
    "vllm_args_tail_under_next_index",
    "kimi_reused_ids_round1",
    "kimi_reused_ids_round2",
    "openai_indexed_parallel",
    "openai_text_usage_only_last_chunk",
    "openai_n2_choices",
    "keepalive_comments",
    "crlf_line_endings",
    "gemini_error_400_array",
    "openai_error_429_retry_after",
    "openai_error_500",
    "gemini_fragmented_parallel_split_mid_json",
}

GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m proxy ARGS` from the repository root, without any STREAMFIX_* environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFIX_")}
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def statuses(stdout: str) -> dict[str, str]:
    """`streamfix replay`'s verdict per cassette: {"name.json": "ok" | "CHANGED" | ...}."""
    found = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].endswith(".json"):
            found[parts[1]] = parts[0]
    return found


# ── the corpus ───────────────────────────────────────────────────────────────


def test_corpus_replays_clean_through_the_command_line() -> None:
    # How CI runs the corpus check.
    result = cli("replay", "recordings")
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert statuses(result.stdout) == {path.name: "ok" for path in CORPUS}, report
    assert f"{len(CORPUS)} cassettes, 0 with differences or violations" in result.stdout
    assert "VIOLATION" not in result.stdout


def test_corpus_holds_every_required_behaviour_and_the_readme_lists_each() -> None:
    names = {path.stem for path in CORPUS}
    assert names >= REQUIRED
    assert names == {case.name for case in CASES}, "recordings/ and make_recordings disagree"
    readme = (RECORDINGS / "README.md").read_text()
    for name in names:
        assert f"`{name}.json`" in readme
    assert "*not* captured" in readme and "fake upstream" in readme


def _transcript_cassettes() -> list[Any]:
    known = set(transcript_names()) | set(wire_transcript_names())
    cases = []
    for path in CORPUS:
        cassette = Cassette.load(path)
        body = cassette.body_json if isinstance(cassette.body_json, dict) else {}
        if cassette.status == 200 and body.get("stream") and body.get("model") in known:
            cases.append(pytest.param(path, body["model"], id=path.stem))
    return cases


@pytest.mark.parametrize(("path", "transcript"), _transcript_cassettes())
def test_recorded_client_output_is_the_transcripts_expected_answer(
    path: Path, transcript: str
) -> None:
    """The corpus check compares with what was recorded; this checks that what was recorded
    is right: the calls, text and finish reason of the transcript's `expect`."""
    out = Cassette.load(path).client_body
    assert violations(out, "auto") == []  # recorded under the default emission
    calls, text, reasons = assembled_calls(out), content(out), finish_reasons(out)
    for want in load_transcript(transcript).meta["expect"]["choices"]:
        index = want["index"]
        assert reasons.get(index) == [want["finish_reason"]]
        assert text.get(index, "") == want["content"]
        got = calls.get(index, [])
        assert [(c["name"], orjson.loads(c["arguments"])) for c in got] == [
            (c["name"], c["arguments"]) for c in want["tool_calls"]
        ]
        for call, expected in zip(got, want["tool_calls"], strict=True):
            if path.stem == "kimi_reused_ids_round2":
                continue  # renamed: see the next test
            if expected["id"] is None:
                assert GENERATED_ID.fullmatch(call["id"])
            else:
                assert call["id"] == expected["id"]
            google = (call["extra_content"] or {}).get("google") or {}
            assert google.get("thought_signature") == expected.get("thought_signature")


def test_kimi_round_two_cassette_shows_the_reused_ids_renamed() -> None:
    one = Cassette.load(RECORDINGS / "kimi_reused_ids_round1.json")
    two = Cassette.load(RECORDINGS / "kimi_reused_ids_round2.json")
    first_ids = [c["id"] for c in assembled_calls(one.client_body)[0]]
    assert first_ids == ["functions.search_web:0", "functions.read_file:1"]
    # Round two's request carries round one's calls and results...
    history = two.body_json["messages"]
    assert [c["id"] for c in history[1]["tool_calls"]] == first_ids
    assert [m["tool_call_id"] for m in history[2:]] == first_ids
    # ...the upstream numbered its calls from :0 again, the client got them renamed.
    upstream = b"".join(c.data for c in two.chunks)
    assert b'"id":"functions.search_web:0"' in upstream
    second_ids = [c["id"] for c in assembled_calls(two.client_body)[0]]
    assert second_ids == ["functions.search_web:2", "functions.read_file:3"]


def test_error_cassettes_keep_status_headers_and_body() -> None:
    gemini = Cassette.load(RECORDINGS / "gemini_error_400_array.json")
    assert gemini.status == 400 and isinstance(orjson.loads(upstream_bytes(gemini)), list)
    # Only the array around Google's error object is taken away: the object is as it came.
    [upstream_error] = orjson.loads(upstream_bytes(gemini))
    assert orjson.loads(gemini.client_body) == upstream_error
    limited = Cassette.load(RECORDINGS / "openai_error_429_retry_after.json")
    assert limited.status == 429 and limited.response_headers["retry-after"] == "3"
    assert orjson.loads(limited.client_body)["error"]["code"] == "rate_limit_exceeded"
    broken = Cassette.load(RECORDINGS / "openai_error_500.json")
    assert broken.status == 500
    for cassette in (limited, broken):
        assert cassette.client_body == upstream_bytes(cassette)  # untouched


# ── streamfix replay: changed repairs, violations, --update ──────────────────


def test_replay_check_fails_on_a_changed_repair_and_passes_after_update(tmp_path: Path) -> None:
    # Recorded when the proxy emitted calls incrementally; replayed with emit = "atomic".
    record = tmp_path / "incremental"
    atomic = tmp_path / "atomic.toml"
    atomic.write_text('[tool_calls]\nemit = "atomic"\n')
    with (
        running_fake_upstream() as (_, fake_url),
        running_proxy(
            f"{fake_url}/v1",
            **{"recording.record_dir": str(record), "tool_calls.emit": "incremental"},
        ) as proxy,
    ):
        raw_stream(proxy, "openai_indexed_fragmented")
        wait_until(lambda: len(list(record.glob("*.json"))) == 1, "1 cassette", timeout=10.0)
    [path] = record.glob("*.json")
    incremental = Cassette.load(path).client_body

    result = cli("replay", str(record), "--config", str(atomic))
    assert result.returncode == 1, result.stdout + result.stderr
    assert statuses(result.stdout) == {path.name: "CHANGED"}
    assert "--- recorded" in result.stdout and "+++ today" in result.stdout
    assert re.search(r'^\s+-data: .*"arguments":"city"', result.stdout, re.M)
    assert re.search(
        r'^\s+\+data: .*"arguments":"\{\\"city\\":\\"Paris, France', result.stdout, re.M
    )
    assert "1 cassettes, 1 with differences or violations" in result.stdout
    assert Cassette.load(path).client_body == incremental  # nothing rewritten without --update

    updated = cli("replay", str(record), "--update", "--config", str(atomic))
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert statuses(updated.stdout) == {path.name: "updated"}
    assert Cassette.load(path).client_body != incremental

    again = cli("replay", str(record), "--config", str(atomic))
    assert again.returncode == 0 and statuses(again.stdout) == {path.name: "ok"}


def test_replay_check_fails_on_an_edited_client_output(tmp_path: Path) -> None:
    name = "vllm_named_tool_choice_stop.json"
    document = json.loads((RECORDINGS / name).read_text())
    lines = document["client"]["lines"]
    [finish] = [i for i, line in enumerate(lines) if '"finish_reason":"tool_calls"' in line]
    lines[finish] = lines[finish].replace('"finish_reason":"tool_calls"', '"finish_reason":"stop"')
    (tmp_path / name).write_text(json.dumps(document, indent=2))

    result = cli("replay", str(tmp_path))
    assert result.returncode == 1
    assert statuses(result.stdout) == {name: "CHANGED"}
    assert re.search(r'^\s+-data: .*"finish_reason":"stop"', result.stdout, re.M)
    assert re.search(r'^\s+\+data: .*"finish_reason":"tool_calls"', result.stdout, re.M)
    assert cli("replay", str(tmp_path), "--update").returncode == 0
    assert (
        Cassette.load(tmp_path / name).client_body == Cassette.load(RECORDINGS / name).client_body
    )


def test_replay_check_reports_rule_violations(tmp_path: Path) -> None:
    # With every repair off, today's output is Gemini's raw stream, which breaks the rules.
    shutil.copy(RECORDINGS / "gemini_parallel_one_per_chunk.json", tmp_path)
    config = tmp_path / "plain.toml"
    config.write_text("[repairs]\nenabled = false\n")
    cassettes = tmp_path / "cassettes"
    cassettes.mkdir()
    shutil.move(tmp_path / "gemini_parallel_one_per_chunk.json", cassettes)
    result = cli("replay", str(cassettes), "--config", str(config))
    assert result.returncode == 1
    violations_found = [line for line in result.stdout.splitlines() if "VIOLATION" in line]
    assert any("without an integer index" in line for line in violations_found), result.stdout


# ── a front's cassette: the client's own request through its door ────────────


def test_a_front_cassette_replays_the_clients_request_through_its_door(tmp_path: Path) -> None:
    """A Messages exchange recorded by the Anthropic client replays as it was served: the
    client's own request (kept in the cassette) through the Messages door, answered from the
    recording. So what the door does to that request shows: a request it refuses is a
    refusal today, and a cassette without the request cannot be replayed at all."""
    record = tmp_path / "recorded"
    with (
        running_fake_upstream() as (_, root),
        running_proxy(f"{root}/v1", **{"recording.record_dir": str(record)}) as proxy,
    ):
        said = [{"role": "user", "content": QUESTION}]
        request = {"model": GEMINI, "max_tokens": 400, "tools": MESSAGES_TOOLS, "messages": said}
        anthropic_client(proxy).messages.create(**request)
        wait_until(lambda: len(list(record.glob("*.json"))) == 1, "1 cassette", timeout=10.0)
    [path] = record.glob("*.json")
    assert statuses(cli("replay", str(record)).stdout) == {path.name: "ok"}

    document = json.loads(path.read_text())
    assert document["client_request"]["path"] == "/v1/messages"
    document["client_request"]["body"] = {**request, "max_tokens": "many"}
    path.write_text(json.dumps(document))
    refused = cli("replay", str(record))
    assert refused.returncode == 1 and statuses(refused.stdout) == {path.name: "CHANGED"}
    assert re.search(
        r'^\s+\+\{"type":"error","error":\{"type":"invalid_request_error"', refused.stdout, re.M
    )

    del document["client_request"]
    path.write_text(json.dumps(document))
    stale = cli("replay", str(record))
    assert stale.returncode == 1 and statuses(stale.stdout) == {path.name: "STALE"}
    assert "recorded before the client's own request was kept" in stale.stdout


def test_a_messages_replay_reads_the_start_estimate_as_recorded_and_the_usage_as_it_is(
    tmp_path: Path,
) -> None:
    """`message_start`'s `input_tokens` is the proxy's estimate at the ratio its answers had
    taught it (a build that sent 0, a replica that had learned more): a replay does not count
    it as a change. The usage the upstream reported, in `message_delta`, still is one."""
    record = tmp_path / "recorded"
    with (
        running_fake_upstream() as (_, root),
        running_proxy(f"{root}/v1", **{"recording.record_dir": str(record)}) as proxy,
    ):
        said = [{"role": "user", "content": QUESTION}]
        request = {"model": GEMINI, "max_tokens": 400, "tools": MESSAGES_TOOLS, "messages": said}
        with anthropic_client(proxy).messages.stream(**request) as events:
            events.get_final_message()
        wait_until(lambda: len(list(record.glob("*.json"))) == 1, "1 cassette", timeout=10.0)
    [path] = record.glob("*.json")
    document = json.loads(path.read_text())
    lines = document["client"]["lines"]
    start = next(i for i, line in enumerate(lines) if '"type":"message_start"' in line)
    assert re.search(r'"usage":\{"input_tokens":[1-9]', lines[start]), lines[start]
    lines[start] = re.sub(r'("usage":\{"input_tokens":)[0-9]+', r"\g<1>0", lines[start])
    path.write_text(json.dumps(document))
    assert statuses(cli("replay", str(record)).stdout) == {path.name: "ok"}
    delta = next(i for i, line in enumerate(lines) if '"type":"message_delta"' in line)
    lines[delta] = re.sub(r'("output_tokens":)[0-9]+', r"\g<1>12345", lines[delta])
    path.write_text(json.dumps(document))
    assert statuses(cli("replay", str(record)).stdout) == {path.name: "CHANGED"}
