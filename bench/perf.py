"""Performance: streamfix against direct, a raw TCP relay, a do-nothing proxy, LiteLLM and
Portkey's gateway (issue 9).

    python bench/perf.py                 # the full run, about 12 minutes on 2 cores
    python bench/perf.py --quick         # a smoke run of about a minute
    python bench/perf.py --phase peers   # the peer table alone: about 3 minutes
    python bench/perf.py --profile 15    # then py-spy streamfix, 15 s per profiled load
    python bench/perf.py --phase correctness --no-litellm --no-portkey --profile 20
        --profile-load json:1 --profile-load text:1   # (one line) where a request's time goes
    python bench/perf.py --no-litellm    # without LiteLLM (its start-up alone takes 10-60 s)
    python bench/perf.py --no-portkey    # without Portkey's gateway
    python bench/perf.py --compare-clients  # plus do-nothing on httpx's upstream client (+1 min)
    python bench/perf.py --phase latency    # one phase only (repeatable), with the targets it needs
    python bench/perf.py --phase builds --against 4c4a637 --against main
                                         # this tree against earlier builds, alternating (~3 min)

Each phase is one module of bench/perf/ (its __init__ lists them); this file is the entry.

Processes, all on 127.0.0.1, each its own process group, all ended in `finally`:

- the fake upstream (bench/perf_fake.py): raw asyncio HTTP/1.1, answers chosen by model name;
- the targets: **direct** (the client talks to the fake: the limit), **relay**
  (bench/perf_relay.py: a raw TCP relay, asyncio on uvloop, that accepts on 127.0.0.1, opens a
  connection to the fake per connection and copies bytes both ways until either side closes,
  then closes both; no HTTP parsing: the physical floor of any proxy, one more loopback hop and
  one more process), **do-nothing** (`python -m proxy serve` with `repairs.enabled = false`),
  **streamfix** (default config,
  profile auto: the fake's host says nothing, so the evidence profile watches every stream for
  receipts and captures the Gemini stream's signatures), and
  **litellm** (`litellm[proxy]` in bench/results/litellm-venv, installed when missing, an
  OpenAI-compatible passthrough `openai/*` to the same fake), **portkey** (Portkey's gateway,
  `@portkey-ai/gateway` installed with the test extra's npm into bench/results/portkey on
  first use, with the fix it needs to stream, bench/perf/portkey.py; routed to the fake by
  `x-portkey-provider: openai` and `x-portkey-custom-host`); with `--compare-clients` also
  **do-nothing-httpx** (do-nothing with `server.upstream_client = "httpx"`: the upstream client
  proxy/upstream/http1.py replaced), so the client's own effect is a ratio of two columns of one
  run;
- the load generator (bench/perf_load.py): raw asyncio HTTP/1.1 client, one process, jobs
  over a pipe.

Phases run metric by metric, each over every target in turn, so that a noisy moment of the
machine lands on all targets alike (LiteLLM aside, see below):

1. correctness: one answer per stream kind from every target; streamfix's tool-call streams
   must pass `proxy.repair.conformance.violations` and carry exactly the fake's calls (checked again
   after the load);
2. memory: idle RSS, then RSS with N slow streams held open (per-stream cost);
3. added latency: concurrency 1, non-streamed and a 20-event stream, targets interleaved
   request by request; target minus direct at the median and p99. Block 1 interleaves
   direct, relay, do-nothing (and do-nothing-httpx) and streamfix (both kinds); then LiteLLM
   and Portkey each get a block of their own with direct, and their added latency is against
   that block's direct (`OWN_LATENCY_BLOCK`: LiteLLM leaves work behind, Portkey's Node
   process interleaved with the others doubled their figures);
4. throughput: closed-loop workers at concurrency 1, 50, 200 on 50-event streams (text,
   Gemini tool calls, OpenAI fragmented tool calls), in rounds with the targets taking turns;
   the best round counts;
5. CPU: server CPU seconds (whole process tree, from /proc) per 10,000 upstream events, from
   a fixed load at concurrency 50, in rounds too;
6. growth: RSS before and after 20,000 sequential exchanges (capped in time; the count done
   is reported); not for do-nothing-httpx (about 23 s more, and not what it is there for);
7. the text tool-call recogniser: two more streamfix processes, **markup-on** and
   **markup-off**, the default config but for `upstream.text_tool_calls` (true / false),
   measured against each other only: plain-text streams (no markup) to a request that declares
   tools, so the recogniser watches every piece of content and finds nothing. Their output is
   first checked to be the fake's text exactly (no tool calls, finish "stop"); then
   throughput at c=50 (and c=1 in the full run) in rounds, the two taking turns and swapping
   who goes first each round, best round each, the ratio on / off (issue: the recogniser costs
   under 5 %, i.e. >= 0.95); then the time to the first content byte of a stream whose
   upstream waits 20 ms between events, interleaved with direct: on and off less direct, and
   on - off, which would be about 20 ms if the recogniser held back the first piece of plain
   text waiting for the next one; and the recogniser's CPU per event in process (the default
   repair chain over the same stream, on against off), as a share of markup-off's server CPU
   per event. On 2 cores shared with other work, two identically configured servers differed by
   up to 10 % in throughput and in CPU per event (an A/A run, both off: 1.09 and 0.90), so the
   two-server ratios only catch a large cost; the in-process share is the steady figure.

LiteLLM keeps working after each response (logging and callback tasks and threads), and on
2 cores that work lands on whatever is measured next, not on all targets alike: interleaved
with the others, it doubled their figures (do-nothing, non-streamed added median 0.64 ms
without LiteLLM in the run, 1.25 ms with it; server CPU 0.64 -> 1.36 ms per request). Such
targets are listed in `LEAVES_WORK_BEHIND`: they get latency blocks of their own (3.), and
every measurement that follows one of theirs (latency blocks, throughput and CPU rounds,
growth, memory, profile) first waits until every server's process tree is under 2 % of a
core over 200 ms, at most 15 s ("settle"; each wait in perf.json, summed up in one line).

`--phase peers` (not in the full run) is the short peer comparison: non-streamed added latency
(each target alternating with direct in a block of its own), streamed text at c=16 as a share
of direct in rotating rounds, and RSS, for direct, the relay, do-nothing, streamfix, LiteLLM and
Portkey (bench/perf/peers.py). A peer that cannot be installed or started keeps its column,
marked not measured, with the reason under the table.

Prints one table and writes bench/results/perf.json (raw figures of every phase included).
Under the table, the ratios: streamfix / litellm (added latency, CPU per event), streamfix /
do-nothing (throughput at c=50), streamfix / relay (added latency at the median, throughput at
c=50: how far streamfix is from the floor; no latency ratio when the relay's added median is
at or below 0, i.e. within noise of direct), and do-nothing / do-nothing-httpx.
Under the ratios, the recogniser's figures (7.), and its two targets with issue 9's.
Exit status: 0; 1 when streamfix's output failed a correctness check; 2 when the run was
aborted (a target that would not start, a job past its time limit, the overall deadline).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perf.main import main

if __name__ == "__main__":
    sys.exit(main())
