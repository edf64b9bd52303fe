"""bench/perf.py split into its phases: one module per phase, plus what they share.

    config.py       paths, stream kinds, target names, the run's Plan, progress and Failed
    machine.py      the machine and the revision measured
    servers.py      starting the targets (streamfix, the relay, LiteLLM) and waiting for them
    portkey.py      Portkey's gateway: installed with npm on first use, fixed, started
    load.py         the load generator's process (bench/perf_load.py) and its job pipe
    settle.py       waiting for servers to go quiet after a target that leaves work behind
    rounds.py       loads in rounds, the targets taking turns
    correctness.py  one answer per stream kind from every target, checked
    warmup.py       every target through each kind of exchange before anything counts
    memory.py       idle RSS and RSS with slow streams held open     (--phase memory)
    latency.py      added latency at concurrency 1, interleaved      (--phase latency)
    throughput.py   closed-loop throughput at several concurrencies  (--phase throughput)
    cpu.py          server CPU per 10k events under a fixed load     (--phase cpu)
    growth.py       RSS over many sequential exchanges               (--phase growth)
    markup.py       the text tool-call recogniser, on against off    (--phase markup)
    first_argument.py  time to a 20 KB call's first argument byte    (--phase first_argument)
    peers.py        streamfix beside LiteLLM and Portkey, in short   (--phase peers)
    builds.py       this tree against earlier commits                (--against REV)
    profile.py      py-spy on streamfix under load                   (--profile SECONDS)
    report.py       the table, the ratios and the issue's goals
    main.py         the command line and the order of the phases

`python bench/perf.py` puts bench/ and the repository root on sys.path and calls main.main.
"""
