"""`streamfix explain`: the real CLI over recorded cassettes and over cassettes built here for
each way a stream can end, and exact attribution over a chain of the real repairs fed a
hand-written stream."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from proxy.explain.attribution import AttributingChain, Attribution, Label
from proxy.explain.diff import MISSING
from proxy.explain.phases import AttributingPhases
from proxy.repair.answer import AnswerMachine
from proxy.repair.forwarded import Forwarded
from proxy.repair.phases import Phases
from proxy.repair.pipeline import Link, RepairChain
from proxy.repair.rules import RouteRules
from proxy.repair.tally import Tally
from proxy.repair.tenancy import ReceiptScope
from proxy.settings.chain import chain_options
from proxy.settings.schema import Settings
from proxy.store.opening import open_store
from proxy.upstream.cassettes import Cassette, Chunk
from tests.support.streams import chat_stream

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "recordings"
GEMINI_STOP = RECORDINGS / "gemini_indexless_call_stop.json"
ANSI = "\x1b["


def explain(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m proxy explain ARGS` from the repository root, stdout piped, without any
    STREAMFIX_* or colour settings of the caller's environment."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("STREAMFIX_") and k not in ("NO_COLOR", "FORCE_COLOR")
    }
    return subprocess.run(
        [sys.executable, "-m", "proxy", "explain", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def document(*args: str) -> dict[str, Any]:
    result = explain(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def labels_of(cassette: dict[str, Any]) -> list[dict[str, Any]]:
    return [label for event in cassette["events"] for label in event["labels"]]


# (a) The Gemini turn whose call had no index and ended with "stop".


def test_gemini_stop_shows_the_finish_rewrite_and_the_call_changes() -> None:
    result = explain(str(GEMINI_STOP))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # The finish rewrite, under FinishReasonRepair's label, whatever kinds it comes to count.
    assert re.search(
        r"\[FinishReasonRepair: [^\]]*\]\n\s+~ choices\[0\]\.finish_reason: "
        r'"stop" → "tool_calls"',
        out,
    ), out
    # The call held back from the first event, and released whole, with the index it lacked.
    assert re.search(r"\[ToolCallRepair: [^\]]*\]\n\s+- choices\[0\]\.delta\.tool_calls", out)
    assert '"tool_calls":[{"index":0,"id":"623rbkd0"' in out
    assert "[SingleRoleRepair: " in out
    assert "totals:" in out


# (b) --json holds per-event attribution.


def test_json_attributes_each_event() -> None:
    [cassette] = document(str(GEMINI_STOP))["cassettes"]
    assert cassette["name"] == GEMINI_STOP.name
    assert cassette["mode"] == "stream" and cassette["accounted"] is True
    events = cassette["events"]
    first, finish, done = events
    assert first["upstream"]["choices"][0]["delta"]["tool_calls"][0]["id"] == "623rbkd0"
    assert "tool_calls" not in first["client"][0]["choices"][0]["delta"]
    assert [label["repair"] for label in first["labels"]] == ["ToolCallRepair"]
    assert len(finish["client"]) == 2
    assert [label["repair"] for label in finish["labels"]] == [
        "ToolCallRepair",
        "FinishReasonRepair",
        "SingleRoleRepair",
    ]
    rewrite = finish["labels"][1]["changes"]
    assert rewrite == [
        {"path": "choices[0].finish_reason", "before": "stop", "after": "tool_calls"}
    ]
    assert done == {"upstream": "[DONE]", "client": ["[DONE]"], "changes": [], "labels": []}
    assert cassette["request"]["changes"] == []
    assert cassette["end"] == "clean" and cassette["end_detail"] == "the upstream's [DONE]"


def test_json_kinds_land_on_the_repair_and_event_that_counted_them() -> None:
    cassettes = document(str(RECORDINGS))["cassettes"]
    by_name = {cassette["name"]: cassette for cassette in cassettes}
    gemma = by_name["vllm_gemma4_missing_id_name.json"]
    counted = [label for label in labels_of(gemma) if label["kinds"]]
    assert {label["repair"] for label in counted} == {"ToolCallRepair"}
    assert sum(label["kinds"].get("tool_call_id_generated", 0) for label in counted) == 1
    assert gemma["totals"]["tool_call_id_generated"] == 1
    # Kimi's second round reuses the first round's ids: the renames are ReusedCallIdRepair's.
    kimi = by_name["kimi_reused_ids_round2.json"]
    reused = [label for label in labels_of(kimi) if "call_id_reused" in label["kinds"]]
    assert {label["repair"] for label in reused} == {"ReusedCallIdRepair"}
    assert sum(label["kinds"]["call_id_reused"] for label in reused) == 2
    # An upstream without [DONE]: the pipeline adds it, on an event of its own.
    no_done = by_name["openai_no_done.json"]
    assert no_done["events"][-1]["upstream"] is None
    assert no_done["events"][-1]["client"] == ["[DONE]"]
    assert no_done["events"][-1]["labels"] == [
        {"repair": "pipeline", "kinds": {"done_added": 1}, "action": "added", "changes": []}
    ]
    assert (no_done["end"], no_done["end_detail"]) == ("clean", "finished, without a [DONE]")
    # Every kind counted is accounted for: on an event, the request, or a note.
    for cassette in cassettes:
        attributed: dict[str, int] = {}
        places = labels_of(cassette) + cassette["notes"]
        for body in (cassette["request"], cassette["response"]):
            places += body["labels"] if body else []
        for label in places:
            for kind, n in label["kinds"].items():
                attributed[kind] = attributed.get(kind, 0) + n
        assert attributed == cassette["totals"], cassette["name"]


def test_non_streamed_and_error_cassettes() -> None:
    by_name = {c["name"]: c for c in document(str(RECORDINGS))["cassettes"]}
    body = by_name["gemini_indexless_call_nonstreamed.json"]
    assert body["mode"] == "json" and body["events"] == []
    assert body["response"] is not None
    assert (body["end"], body["end_detail"]) == ("clean", "a chat completion")
    error = by_name["openai_error_500.json"]
    assert error["mode"] == "relayed" and error["status"] == 500 and error["relayed"]
    assert error["end"] is None  # no answer went through the machine


# (c) Colour on a terminal only.


def test_piped_output_is_plain_and_forced_colour_is_not() -> None:
    plain = explain(str(GEMINI_STOP))
    assert plain.returncode == 0 and ANSI not in plain.stdout
    forced = explain(str(GEMINI_STOP), FORCE_COLOR="1")
    assert forced.returncode == 0 and ANSI in forced.stdout
    assert ANSI in explain(str(GEMINI_STOP), "--color", "always").stdout
    assert ANSI not in explain(str(GEMINI_STOP), FORCE_COLOR="1", NO_COLOR="1").stdout
    assert ANSI not in explain(str(GEMINI_STOP), "--color", "never", FORCE_COLOR="1").stdout
    # The colours decorate the same text.
    assert re.sub(r"\x1b\[[0-9;]*m", "", forced.stdout) == plain.stdout


# (d) Every recording explains cleanly.


def test_every_recording_explains() -> None:
    result = explain(str(RECORDINGS))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    names = sorted(path.name for path in RECORDINGS.glob("*.json"))
    headers = re.findall(r"^== (\S+) ", result.stdout, re.MULTILINE)
    assert headers == names
    assert "do not add up" not in result.stdout  # the rows are what the client was sent
    cassettes = document(str(RECORDINGS))["cassettes"]
    assert all(cassette["accounted"] for cassette in cassettes)
    assert "authorization" not in result.stdout.lower()


# (e) A bad path is refused with a reason.


def test_bad_paths_exit_2_with_a_message(tmp_path: Path) -> None:
    missing = explain(str(tmp_path / "nope.json"))
    assert missing.returncode == 2
    assert "no such file or directory" in missing.stderr and not missing.stdout
    (tmp_path / "other.json").write_text('{"not": "a cassette"}')
    wrong = explain(str(tmp_path / "other.json"))
    assert wrong.returncode == 2 and "not a readable cassette" in wrong.stderr
    (tmp_path / "broken.json").write_text("{")
    assert explain(str(tmp_path / "broken.json")).returncode == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    none = explain(str(empty))
    assert none.returncode == 2 and "no cassettes" in none.stderr
    for result in (missing, wrong, none):
        assert "Traceback" not in result.stderr


# (f) Exact attribution over the real repairs, from a hand-written stream.

TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
STREAM = [
    # A call in two fragments, without id or role; then its finish, and the finish repeated.
    {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"name": "read", "arguments": '{"a"'}}]}}]},
    {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": ":1}"}}]}}]},
    {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
]  # fmt: skip


# What the upstream left out of the call, each counted where ToolCallRepair fills it in.
CALL_KINDS = {
    "tool_call_id_generated": 1,
    "tool_call_type_added": 1,
    "tool_call_fragments_assembled": 1,
}


async def _attributed(chunks: list[dict[str, Any]]) -> tuple[AttributingChain, bytes]:
    settings = Settings.load(None, {}).with_values({"repairs.strict": True})
    exchange = Tally("t")
    phases = AttributingPhases(chain_options(settings), open_store(settings.receipts))
    chain = phases.stream(Forwarded({"messages": [], "tools": TOOLS}), exchange)

    async def upstream():  # type: ignore[no-untyped-def]
        for chunk in chunks:
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        yield b"data: [DONE]\n\n"  # ended as an answer: the closing chunks follow

    return chain, await chat_stream(upstream(), chain, exchange)


def test_attribution_is_exact_for_real_repairs() -> None:
    chain, sent = asyncio.run(_attributed(STREAM))
    fragment_1, fragment_2, finish, repeated = chain.steps
    # The fragments are held back, ToolCallRepair's drop; nothing else saw them.
    assert fragment_1.labels == [Label("ToolCallRepair", {}, "dropped")]
    assert fragment_2.labels == [Label("ToolCallRepair", {}, "dropped")]
    assert fragment_1.client == fragment_2.client == []
    # The finish releases the whole call first, with the id ToolCallRepair generated, and the
    # role SingleRoleRepair put on the first delta the client gets.
    call, finished = (orjson.loads(raw.removeprefix(b"data: ")) for raw in finish.client)
    generated = call["choices"][0]["delta"]["tool_calls"][0]["id"]
    assert finish.labels == [
        Label("ToolCallRepair", CALL_KINDS, "split into 2"),
        Label("SingleRoleRepair", {"role_added": 1}, "changed", [
            ("choices[0].delta.role", MISSING, "assistant")]),
    ]  # fmt: skip
    assert generated.startswith("call_") and finished["choices"][0]["finish_reason"] == "tool_calls"
    # The repeated finish is FinishReasonRepair's alone: emptied, the chunk kept.
    repeated_finish = [("choices[0].finish_reason", "tool_calls", None)]
    assert repeated.labels == [
        Label(
            "FinishReasonRepair", {"finish_reason_repeated_dropped": 1}, "changed", repeated_finish
        )
    ]
    # What the steps say went out is what went out, [DONE] aside (the pipeline's).
    assert (
        b"".join(raw for step in chain.steps for raw in step.client) + b"data: [DONE]\n\n" == sent
    )
    assert dict(chain.tally.repairs) == {
        **CALL_KINDS,
        "role_added": 1,
        "finish_reason_repeated_dropped": 1,
    }


def test_closing_events_are_attributed_to_the_repair_that_added_them() -> None:
    # `[DONE]` and no finish: FinishReasonRepair supplies it at stream end.
    chain, sent = asyncio.run(_attributed([{"id": "c", "choices": [{"index": 0, "delta": {
        "role": "assistant", "content": "hi"}}]}]))  # fmt: skip
    text, closing = chain.steps
    assert text.labels == [] and text.upstream is not None
    assert closing.upstream is None
    assert closing.labels == [Label("FinishReasonRepair", {"finish_reason_added": 1}, "added")]
    assert b'"finish_reason":"stop"' in closing.client[0] and closing.client[0] in sent


class _Broken(Link):
    """A repair with a bug: the chain passes its input on unrepaired and says whose it was."""

    def on_chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]] | None:
        chunk["touched"] = True
        raise RuntimeError("bug")


def test_a_failing_repair_is_named_and_its_input_passes_on() -> None:
    chain = AttributingChain([_Broken()], Attribution(Tally("t")))
    chunk = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    raw = b"data: " + orjson.dumps(chunk) + b"\n\n"
    assert chain.on_chunk(chunk, raw) == [(chunk, raw)]  # as the plain chain does
    [step] = chain.steps
    assert step.labels == [Label("_Broken", {}, "failed: RuntimeError")]
    assert step.client == [raw]


def test_request_changes_are_attributed_to_the_repair_that_made_them() -> None:
    settings = Settings.load(None, {})
    body = {"messages": [{"role": "user", "content": "go"}, {"role": "tool", "content": "x"}]}
    phases = AttributingPhases(chain_options(settings), open_store(settings.receipts))
    no_tenant = ReceiptScope(None, "none")
    _, changed = asyncio.run(phases.request(body, RouteRules(), no_tenant, Tally("t")))
    assert changed is True
    [seen] = phases.attributions
    assert seen.request is not None
    assert seen.request.after == {"messages": [{"role": "user", "content": "go"}]}
    [history, receipts] = seen.request.labels
    assert history.repair == "HistoryRepair" and history.action == "changed"
    assert history.kinds == {"history_orphan_result_dropped": 1}
    assert [path for path, _, _ in history.changes] == ["messages"]
    assert receipts == Label("ReceiptLookup", {"receipts_skipped_no_credential": 1})


def test_several_paths_in_one_run() -> None:
    other = RECORDINGS / "openai_no_done.json"
    names = [c["name"] for c in document(str(GEMINI_STOP), str(other))["cassettes"]]
    assert names == [GEMINI_STOP.name, other.name]
    assert explain(str(GEMINI_STOP), "/nonexistent").returncode == 2


def test_the_proxy_itself_runs_the_plain_chain() -> None:
    """The attributing chain and the recording machine are explain's alone: the served chain
    is `RepairChain` itself, whose hot loop has no snapshots, in the plain `AnswerMachine`,
    which hands the door's rendering its pieces unwatched."""
    settings = Settings.load(None, {})
    phases = Phases(chain_options(settings), open_store(settings.receipts))
    chain = phases.stream(Forwarded({}), Tally("t"))
    assert type(chain) is RepairChain
    machine = phases.answer(Forwarded({}), Tally("t"), 1024)
    assert type(machine) is AnswerMachine
    rendering = object()
    assert machine.watched(rendering) is rendering  # type: ignore[arg-type]


# (g) Each end of a stream, as the answer machine decided it, from cassettes built here.


def _chunk(**delta: Any) -> bytes:
    choice = {"index": 0, "delta": delta}
    return b"data: " + orjson.dumps({"id": "c", "choices": [choice]}) + b"\n\n"


def _stream_cassette(directory: Path, name: str, pieces: list[bytes]) -> Path:
    """A chat client's streamed exchange whose upstream sent `pieces` (a 200 event stream)."""
    request = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    cassette = Cassette(
        "POST",
        "chat/completions",
        "",
        {"content-type": "application/json"},
        orjson.dumps(request),
        200,
        {"content-type": "text/event-stream"},
        [Chunk(0.0, piece) for piece in pieces],
    )
    path = directory / f"{name}.json"
    cassette.save(path)
    return path


def _error_event(event: dict[str, Any]) -> dict[str, Any]:
    [client] = event["client"]
    return client["error"]  # type: ignore[no-any-return]


def test_a_stream_that_ran_out_unfinished_is_explained_as_truncated(tmp_path: Path) -> None:
    path = _stream_cassette(
        tmp_path, "cut", [_chunk(role="assistant", content="Hel"), _chunk(content="lo")]
    )
    [cassette] = document(str(path))["cassettes"]
    assert cassette["mode"] == "stream" and cassette["accounted"] is True
    assert cassette["end"] == "truncated"
    assert cassette["end_detail"] == "the upstream's stream ended before its answer finished"
    first, second, end = cassette["events"]
    assert [first["labels"], second["labels"]] == [[], []]  # passed through the chain as is
    # No [DONE] and no finish invented: the chat rendering's error event, on a row of its own.
    assert end["upstream"] is None
    assert _error_event(end)["code"] == "upstream_truncated"
    assert end["labels"] == [
        {"repair": "pipeline", "kinds": {"stream_aborted": 1}, "action": "added", "changes": []}
    ]
    assert cassette["totals"] == {"stream_aborted": 1}
    out = explain(str(path)).stdout
    assert "end: truncated (the upstream's stream ended before its answer finished)" in out
    assert "[DONE]" not in out


def test_a_stream_without_an_event_is_explained_as_no_events(tmp_path: Path) -> None:
    path = _stream_cassette(tmp_path, "silent", [b": keepalive\n\n", b": still here\n\n"])
    [cassette] = document(str(path))["cassettes"]
    assert cassette["accounted"] is True
    assert (cassette["end"], cassette["end_detail"]) == (
        "no events",
        "the upstream answered 200 with no event in its stream",
    )
    *comments, end = cassette["events"]
    assert [event["client"] for event in comments] == [[": keepalive"], [": still here"]]
    assert _error_event(end)["code"] == "upstream_no_events"
    assert end["labels"][0]["kinds"] == {"stream_aborted": 1}
    assert "end: no events (" in explain(str(path)).stdout


def test_after_the_upstreams_own_error_nothing_is_invented(tmp_path: Path) -> None:
    error = b'data: {"error":{"message":"overloaded","code":502}}\n\n'
    pieces = [_chunk(role="assistant", content="Hi"), error, _chunk(content="late")]
    path = _stream_cassette(tmp_path, "failed", [*pieces, b"data: [DONE]\n\n"])
    [cassette] = document(str(path))["cassettes"]
    assert cassette["accounted"] is True and cassette["end"] == "upstream error"
    text, failed, late, done = cassette["events"]
    assert text["labels"] == []
    assert failed["labels"][0]["kinds"] == {"upstream_error_event": 1}
    assert failed["client"] == [{"error": {"message": "overloaded", "code": 502}}]
    # The rest relayed as received, the upstream's own [DONE] too; no closing chunk, no end row.
    for event in (late, done):
        assert event["client"] == [event["upstream"]]
        assert event["labels"][0]["action"] == "after the upstream's error: as received"
    assert done["upstream"] == "[DONE]"
