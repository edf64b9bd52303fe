"""Regenerate recordings/, the replay corpus: `python -m tests.support.make_recordings`.

There is no network to the real upstreams here, so the corpus is recorded from the proxy
(`recording.record_dir`, what `streamfix serve --record` sets) in front of the local fake
upstream (tests/support/fake_upstream.py) replaying the documented transcripts (tests/transcripts/,
shapes from PROTOCOL.md). Each case below is one exchange, made with the real OpenAI Python
SDK (httpx for the raw passthrough); its cassette is renamed after the behaviour it shows and
written to recordings/NAME.json, and recordings/README.md is rewritten from the same list.

Deterministic: running it twice gives identical files. The proxy's own made-up ids are seeded
by the exchange; the one thing a live run varies is the chunks' arrival times (microseconds
from a loopback fake, meaningless as pacing), so each chunk's `at` is rewritten to
`TICK * its position`. Chunk boundaries are left as recorded: one per SSE event as the fake
writes them, or cut inside a JSON object / a UTF-8 character where a case asks the fake to.
Request headers are what the SDK sent (its version and Python's), so regenerating with other
versions changes those lines and nothing else.

Only the files this script names are (over)written; other cassettes in recordings/ (real
captures, say) are left alone and listed at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai

from proxy.server.app import create_app
from proxy.settings.schema import Settings
from proxy.upstream.cassettes import Cassette
from tests.support.fake_upstream import (
    Chunking,
    FakeUpstream,
    running_fake_upstream,
    sdk_kwargs,
    split_inside_characters,
    split_inside_json,
)
from tests.support.servers import serve_in_thread
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "recordings"

TICK = 0.01
"""Seconds between two recorded chunks after normalisation (chunk i arrives at i * TICK)."""

# What the recording client says; never written to a cassette
# (tests/upstream/test_recording.py checks that credentials are not), but a receipt's tenant
# is a hash of it, so it must stay the same for the whole run.
API_KEY = "sk-recording-not-a-real-key"

USER = [{"role": "user", "content": "go"}]


# ── the session: fake upstream, recording proxy, clients ─────────────────────


@dataclass
class Session:
    fake: FakeUpstream
    proxy_url: str
    record_dir: Path
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.proxy_url}/v1", api_key=API_KEY, max_retries=0, timeout=30
        )

    @contextmanager
    def chunking(self, chunking: Chunking) -> Iterator[None]:
        self.fake.chunking = chunking
        try:
            yield
        finally:
            self.fake.chunking = "event"


def accumulate(stream: Any) -> dict[int, dict[str, Any]]:
    """Per choice: the text, the finish reason and the calls (by index), as an app would."""
    choices: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        for choice in chunk.choices:
            acc = choices.setdefault(choice.index, {"content": "", "finish": None, "calls": {}})
            acc["content"] += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                call = acc["calls"].setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += tc.id or ""
                call["name"] += (tc.function and tc.function.name) or ""
                call["arguments"] += (tc.function and tc.function.arguments) or ""
            acc["finish"] = choice.finish_reason or acc["finish"]
    return choices


def streamed(
    transcript: str, messages: list[dict[str, Any]] | None = None
) -> Callable[[Session], Any]:
    """A case: one streamed request for `transcript` through the SDK, read to the end."""

    def run(session: Session) -> Any:
        stream = session.client.chat.completions.create(
            model=transcript, messages=messages or USER, stream=True, **sdk_kwargs(transcript)
        )
        with stream:
            return accumulate(stream)

    return run


def split(transcript: str, chunking: Chunking) -> Callable[[Session], Any]:
    """A streamed case whose upstream cuts its events with `chunking`."""

    def run(session: Session) -> Any:
        with session.chunking(chunking):
            return streamed(transcript)(session)

    return run


def non_streamed(transcript: str) -> Callable[[Session], Any]:
    def run(session: Session) -> Any:
        return session.client.chat.completions.create(
            model=transcript, messages=USER, **sdk_kwargs(transcript)
        )

    return run


def error(model: str) -> Callable[[Session], Any]:
    """A streamed request the upstream refuses; the SDK raises, which is the point."""

    def run(session: Session) -> Any:
        try:
            session.client.chat.completions.create(model=model, messages=USER, stream=True)
        except openai.APIStatusError as exc:
            return exc.status_code
        raise AssertionError(f"{model}: the upstream did not refuse")

    return run


def kimi_round_two(session: Session) -> Any:
    """Round two of a Kimi tool loop: the history holds round one's calls (as the client got
    them) and their results; Kimi numbers the new calls from :0 again."""
    first = session.results["kimi_reused_ids_round1"][0]
    calls = [first["calls"][index] for index in sorted(first["calls"])]
    messages = [
        *USER,
        {
            "role": "assistant",
            "content": first["content"],
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in calls
            ],
        },
        *(
            {"role": "tool", "tool_call_id": call["id"], "content": f"result of {call['name']}"}
            for call in calls
        ),
    ]
    return streamed("kimi_per_round_ids", messages)(session)


# ── the corpus ───────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Case:
    name: str
    """The cassette is recordings/NAME.json."""
    what: str
    """What it exercises: one line in recordings/README.md."""
    run: Callable[[Session], Any]


CASES = [
    Case(
        "gemini_indexless_call_stop",
        "Gemini: one complete call in one delta without `index`, signature on the call, `role` "
        'on every delta, ends `"stop"` → index 0, `role` once, `"tool_calls"`; signature kept.',
        streamed("gemini_indexless_call_stop"),
    ),
    Case(
        "gemini_indexless_call_nonstreamed",
        "Gemini, not streamed: a `chat.completion` whose call has no `type` → "
        '`type: "function"` added, everything else as received.',
        non_streamed("gemini_indexless_call_stop"),
    ),
    Case(
        "gemini_parallel_one_per_chunk",
        "Gemini parallel calls: two complete indexless calls, one per chunk, only the first "
        'signed, `"stop"` → indexes 0 and 1, signature stays on the first only.',
        streamed("gemini_parallel_one_per_chunk"),
    ),
    Case(
        "gemini_indexless_fragmented_parallel",
        "Gemini: two calls opened in one chunk, then indexless argument fragments matched by "
        "position → two whole calls.",
        streamed("gemini_indexless_fragmented_parallel"),
    ),
    Case(
        "gemini_indexless_fragmented_single",
        "Gemini: one call's arguments over three indexless deltas (only the first has id and "
        "name), usage mid-stream → one whole call.",
        streamed("gemini_indexless_fragmented_single"),
    ),
    Case(
        "gemini_signature_only_delta",
        "Gemini: two parallel calls, then a delta whose only tool-call entry is a thought "
        "signature (no function, id or index) → the signature lands on the first call; no "
        "function-less entry reaches the client.",
        streamed("gemini_signature_only_delta"),
    ),
    Case(
        "gemini_empty_id",
        'Gemini through an intermediary: a complete call with `id: ""` → a generated '
        "`call_<24 hex>` id (seeded: the same on every replay), signature kept.",
        streamed("gemini_empty_id"),
    ),
    Case(
        "gemini_text_thought_signature",
        "Gemini text answer with thought summaries (`<thought>…</thought>`, "
        "`extra_content.google.thought`), `extra_content: null`, and the text-turn signature on "
        'a last `content: null` delta with `"stop"` → text unchanged, `"stop"` stays.',
        streamed("gemini_text_thought_signature"),
    ),
    Case(
        "gemini_error_400_array",
        'Gemini\'s 400 as a JSON array (`[{"error": …}]`, missing thought_signature) → the '
        "status unchanged, the error object without the array around it "
        "(`error_body_unwrapped`), as OpenAI's clients read it.",
        error("error_gemini_array"),
    ),
    Case(
        "gemini_fragmented_parallel_split_mid_json",
        "Chunk boundaries: the Gemini fragmented-parallel stream with every event cut halfway "
        "through its JSON object (two network chunks per event, neither parses alone) → "
        "replayed with the same cuts, repaired like the whole-event stream.",
        split("gemini_indexless_fragmented_parallel", split_inside_json),
    ),
    Case(
        "vertex_jumping_index",
        "Vertex: one call whose index jumps (1, then 0) with id/type/name repeated on every "
        "delta → one call at index 0, matched by id.",
        streamed("vertex_jumping_index"),
    ),
    Case(
        "vllm_canonical_incremental",
        "vLLM canonical streaming: indexed call opened once (`chatcmpl-tool-…` id), five "
        'argument fragments, `"tool_calls"` → re-sent whole (atomic emission), nothing else '
        "changed.",
        streamed("vllm_canonical_incremental"),
    ),
    Case(
        "vllm_gemma4_missing_id_name",
        "vLLM gemma4 parser: a call with neither id nor name → the only declared tool's name and "
        "a generated, seeded id.",
        streamed("vllm_gemma4_missing_id_name"),
    ),
    Case(
        "vllm_args_tail_under_next_index",
        "vLLM under load: call 0's argument tail (`is\"}`) arrives under index 1 → "
        '`{"city": "Paris"}` and `{"city": "Tokyo"}` given back to their calls.',
        streamed("vllm_args_tail_under_next_index"),
    ),
    Case(
        "vllm_named_tool_choice_stop",
        'vLLM with a named `tool_choice`: a proper indexed call but `"stop"` → `"tool_calls"`.',
        streamed("vllm_named_tool_choice_stop"),
    ),
    Case(
        "kimi_reused_ids_round1",
        "Kimi round one: text, then calls `functions.search_web:0` and `functions.read_file:1` "
        "(ids numbered per round) → ids kept, each call re-sent whole.",
        streamed("kimi_per_round_ids"),
    ),
    Case(
        "kimi_reused_ids_round2",
        "Kimi round two: the request history holds round one's calls and results, and Kimi "
        "numbers the new calls from `:0` again → the reused ids are renamed to the next unused "
        "`functions.NAME:N`.",
        kimi_round_two,
    ),
    Case(
        "openai_indexed_parallel",
        "OpenAI parallel calls, indexed 0/1/2, fragments interleaved across calls (two calls in "
        'one chunk) → three whole calls, `"tool_calls"`.',
        streamed("openai_indexed_parallel"),
    ),
    Case(
        "openai_indexed_fragmented",
        "OpenAI canonical: one call, six argument fragments, `obfuscation` padding → re-sent "
        "whole.",
        streamed("openai_indexed_fragmented"),
    ),
    Case(
        "openai_text_usage_only_last_chunk",
        "OpenAI text answer with `stream_options.include_usage`: a usage-only chunk with "
        '`"choices": []` after the finish → passed through untouched.',
        streamed("openai_text_usage_only_last_chunk"),
    ),
    Case(
        "openai_n2_choices",
        "`n = 2`: two interleaved choices, a fragmented call in choice 0 and text in choice 1 → "
        "per-choice repair, one finish each.",
        streamed("openai_n2_choices"),
    ),
    Case(
        "openai_no_done",
        "An upstream that closes cleanly after the finish chunk without `[DONE]` → the client "
        "gets `[DONE]` once.",
        streamed("openai_no_done"),
    ),
    Case(
        "openai_text_split_mid_utf8_character",
        "Chunk boundaries inside a character: non-ASCII text (ü, ß, ö, —, 東京, ☀️) as raw "
        "UTF-8, every content event cut after the first byte of its first multi-byte character "
        "(those chunks are stored as base64) → text through byte for byte.",
        split("openai_text_multibyte_utf8", split_inside_characters),
    ),
    Case(
        "openai_error_429_retry_after",
        "A 429 in OpenAI's error format with a `retry-after` header (kept in the cassette) → "
        "status and body reach the client unchanged.",
        error("error_openai_429"),
    ),
    Case(
        "openai_error_500",
        "A 500 in OpenAI's error format (`server_error`) → passed through unchanged.",
        error("error_openai_500"),
    ),
    Case(
        "keepalive_comments",
        "SSE comment lines (`: keep-alive`) before and between events (twice in a row once) → "
        "passed on, the fragmented call around them still assembled.",
        streamed("keepalive_comments"),
    ),
    Case(
        "crlf_line_endings",
        "Every SSE line ends in CRLF (events end `\\r\\n\\r\\n`) → decoded, text and the "
        "fragmented call repaired.",
        streamed("crlf_line_endings"),
    ),
]

README_HEAD = f"""\
# recordings/

The replay corpus: one cassette per upstream behaviour streamfix knows, named after it. Each
file holds the request as it went upstream (credentials removed), the upstream's status,
headers and body as the chunks it arrived in, and what the client was sent. CI checks them all
with `streamfix replay recordings` (run by tests/upstream/test_recording.py): today's repairs
must turn each recorded upstream body into exactly the recorded client output, and every
streamed output must meet the client rules (PROTOCOL.md §2.4).

**How they were made.** These cassettes were *not* captured from Gemini, Vertex, vLLM, Kimi
or OpenAI. They were produced by `python -m tests.support.make_recordings`: the proxy recording
(`streamfix serve --record`) in front of the local fake upstream (tests/support/fake_upstream.py)
replaying the transcripts in tests/transcripts/, which are the shapes documented in
PROTOCOL.md (captured or reported by others), with the OpenAI Python SDK as the client. They
show how the proxy handles those shapes; they do not show that the services still send them.
Real captures (`streamfix serve --record DIR` against the real upstream) can be added beside
them; the script only rewrites the files it names.

Arrival times are normalised: the fake answers within microseconds, so the script sets chunk
*i*'s `at` to {TICK} * *i* seconds, which keeps the files identical between runs (and gives
`--replay-timing` a plausible pace). Chunk boundaries are as recorded: one chunk per SSE event,
except where a case below cuts them on purpose.

| cassette | what it exercises |
|---|---|
"""


# ── recording ────────────────────────────────────────────────────────────────


@contextmanager
def recording_session(record_dir: Path) -> Iterator[Session]:
    with running_fake_upstream() as (fake, fake_url):
        settings = Settings().with_values(
            {
                "upstream.base_url": f"{fake_url}/v1",
                "recording.record_dir": str(record_dir),
                "repairs.strict": True,
            }
        )
        with serve_in_thread(create_app(settings)) as proxy_url:
            yield Session(fake, proxy_url, record_dir)


def wait_for_cassette(directory: Path, seen: set[Path], timeout: float = 10.0) -> Path:
    """The one cassette written since `seen` (the proxy writes it as the exchange ends)."""
    new: set[Path] = set()

    def written() -> bool:
        new.clear()
        new.update(set(directory.glob("*.json")) - seen)
        if len(new) > 1:
            raise RuntimeError(f"expected one new cassette, got {sorted(p.name for p in new)}")
        return len(new) == 1

    wait_until(written, f"a new cassette in {directory}", timeout)
    return new.pop()


# The fake listens on a random loopback port; the cassettes name a fixed one so that
# regenerating them changes nothing. The recorded profile, not this URL, decides the rules.
RECORDED_UPSTREAM = "http://127.0.0.1:8000"


def normalised(path: Path) -> Cassette:
    cassette = Cassette.load(path)
    for position, chunk in enumerate(cassette.chunks):
        chunk.at = round(position * TICK, 6)
    path_part = urlsplit(cassette.upstream_base_url).path
    cassette.upstream_base_url = RECORDED_UPSTREAM + path_part
    return cassette


def make(destination: Path, names: set[str] | None = None) -> list[Path]:
    destination.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="streamfix-recording-") as scratch:
        record_dir = Path(scratch)
        with recording_session(record_dir) as session:
            for case in CASES:
                seen = set(record_dir.glob("*.json"))
                session.results[case.name] = case.run(session)
                recorded = wait_for_cassette(record_dir, seen)
                if names is None or case.name in names:
                    target = destination / f"{case.name}.json"
                    normalised(recorded).save(target)
                    written.append(target)
                    print(f"{recorded.name:<58} -> {target}")
    if names is None:
        write_readme(destination)
    return written


def write_readme(destination: Path) -> None:
    rows = [f"| `{case.name}.json` | {case.what} |" for case in CASES]
    (destination / "README.md").write_text(README_HEAD + "\n".join(rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.make_recordings", description=__doc__
    )
    parser.add_argument("--out", type=Path, default=RECORDINGS, help="default: recordings/")
    parser.add_argument("names", nargs="*", help="only these cassettes (all are still recorded)")
    args = parser.parse_args(argv)
    unknown = set(args.names) - {case.name for case in CASES}
    if unknown:
        parser.error(f"unknown cassettes: {', '.join(sorted(unknown))}")
    written = make(args.out, set(args.names) or None)
    own = {path.name for path in written} | {f"{case.name}.json" for case in CASES}
    others = sorted(p.name for p in args.out.glob("*.json") if p.name not in own)
    print(f"{len(written)} cassettes written to {args.out}")
    if others:
        print("not made by this script, left as they are: " + ", ".join(others))
    return 0


if __name__ == "__main__":
    sys.exit(main())
