"""Does the digital twin rank the routers as the live replicas do?

    .venv/bin/python benchmarks/twin_ranking.py --out DIR [-- GATEWAY_COMPARE_OPTIONS...]
    .venv/bin/python benchmarks/twin_ranking.py --from DIR

Runs ``benchmarks/gateway_compare.py --out DIR`` with the options after ``--`` (or reads the
runs of an earlier one with ``--from``), then:

1. **calibrates** an engine profile (``kvharness sim calibrate``) on the runs of one router,
   ``--calibrate-on`` (default ``round_robin``: its placement depends on nothing the twin could
   get wrong), so that whatever this machine adds to every run (the bench and the router beside
   the replicas) is in the profile;
2. **twins** every router's runs on that profile, each router modelled by the kvharness policy
   that reproduces it (``--model ROUTER=POLICY``; defaults below) on as many replicas as the
   live run had, bound to this machine's cores in turn as gateway_compare.py binds them
   (``--host-cores``: with more replicas than cores, two on one core split its time);
3. prints per router, pooled over rounds and over the sessions every live run completed: the
   live mean session makespan (and each round's), the predicted one, the cached-token ratio of
   each, each router's margin over the best one, where the twin put the prompt tokens (to set
   beside gateway_compare's live split), and the two rankings. The calibration
   router's own row is fitted, the others are held out. The twin is held to the pairs of
   routers that every live round puts in the same order: a pair the rounds themselves order
   differently is within this machine's noise, and no twin can be wrong about it.

Default models: ``kvharness`` -> ``agent_aware`` (the gateway runs that very policy; likewise
``kvharness:KEY=VALUE,...`` -> ``agent_aware:KEY=VALUE,...`` and ``gateway:POLICY`` -> ``POLICY``),
``round_robin`` -> ``round_robin``, ``sglang`` -> ``sglang_cache_aware`` (sglang-router's
cache_aware policy re-implemented from its source), ``vllm`` -> ``dynamo_kv`` (vllm-router's
kv_aware picks the replica holding the most of the prompt's blocks by KV events, with load
breaking ties; ``dynamo_kv`` is the kvharness policy of that family, so its row is an
approximation and said so).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import msgspec
from gateway_compare import completed_sessions, spread
from twin_validation import calibrate

from kvharness.bench.run import load_config
from kvharness.report.metrics import summarise
from kvharness.report.records import TurnRecord
from kvharness.sim.twin import BenchRun, load_run, twin_simulation

REPO = Path(__file__).resolve().parents[1]
MODELS = {
    "kvharness": "agent_aware",
    "round_robin": "round_robin",
    "sglang": "sglang_cache_aware",
    "vllm": "dynamo_kv",
}
APPROXIMATE = {"vllm"}
_RUN = re.compile(r"^run-(?P<router>.+)-(?P<round>\d+)$")


def gateway_policy(router: str) -> str | None:
    """The policy a kvharness gateway router of gateway_compare.py runs (``kvharness:OPTIONS``:
    agent_aware with those options, ``gateway:POLICY``: that policy; a ``+FLAG`` changes how
    it reaches the engines, not where it routes); None for any other router."""
    name, sep, rest = router.partition("+")[0].partition(":")
    if name == "kvharness":
        return MODELS["kvharness"] + (f":{rest}" if sep else "")
    if name == "gateway":
        return rest or None
    return None


def replicas_of(run_dir: Path) -> int:
    """The replicas behind the router: the engines the bench read (one ``--metrics-url`` each)."""
    n = len(load_config(run_dir).metrics_urls)
    if not n:
        raise SystemExit(f"{run_dir}: the run read no engine's /metrics (gateway_compare.py "
                         "older than --metrics-url): cannot tell how many replicas served")  # fmt: skip
    return n


def mean_makespan(records: Sequence[TurnRecord]) -> float:
    """Mean session makespan (a session's first send to its last turn's end)."""
    m = summarise(records).makespan.mean
    assert m is not None
    return m


def placement(records: Sequence[TurnRecord], replicas: int) -> str:
    """The twin's prompt tokens per replica (its replicas are ``r0``, ``r1``, ...), as
    gateway_compare.py prints the live split."""
    tokens = [0.0] * replicas
    for r in records:
        if r.replica:
            tokens[int(r.replica[1:])] += r.prompt_tokens
    return spread(tokens)


def rank(values: dict[str, float]) -> list[str]:
    return sorted(values, key=values.__getitem__)


def main() -> int:
    argv = sys.argv[1:]
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="where gateway_compare.py writes its runs")
    ap.add_argument("--from", dest="source", type=Path, help="an earlier gateway_compare --out")
    ap.add_argument("--calibrate-on", default="round_robin", help="the router fitted to")
    ap.add_argument("--model", action="append", default=[], metavar="ROUTER=POLICY",
                    help="the kvharness policy a router's twin routes with")  # fmt: skip
    ap.add_argument("--host-cores", type=int, default=len(os.sched_getaffinity(0)), metavar="N",
                    help="the cores the live replicas were bound to in turn (default: this "
                    "machine's, where gateway_compare.py binds them; 0: model each replica on "
                    "hardware of its own)")  # fmt: skip
    args = ap.parse_args(argv)
    models = dict(MODELS)
    for spec in args.model:
        router, _, policy = spec.partition("=")
        models[router] = policy
    if args.source is None:
        if args.out is None:
            ap.error("give --out (to run gateway_compare.py) or --from")
        t0 = time.perf_counter()
        cmd = [sys.executable, str(REPO / "benchmarks" / "gateway_compare.py"),
               "--out", str(args.out), *passthrough]  # fmt: skip
        subprocess.run(cmd, check=True)
        print(f"live runs: {time.perf_counter() - t0:.0f} s\n")
        folder = args.out
    else:
        folder = args.source
    dirs: dict[str, list[Path]] = defaultdict(list)
    for d in sorted(folder.iterdir()):
        m = _RUN.match(d.name)
        if m and (d / "records.jsonl").is_file():
            dirs[m["router"]].append(d)
    for router in dirs:
        if router not in models and (policy := gateway_policy(router)) is not None:
            models[router] = policy
    if args.calibrate_on not in dirs:
        raise SystemExit(f"{folder}: no runs of {args.calibrate_on!r} to calibrate on")
    replicas = replicas_of(dirs[args.calibrate_on][0])
    unmodelled = sorted(r for r in dirs if r not in models)
    if unmodelled:
        print(f"not modelled (no --model): {', '.join(unmodelled)}")
    profile, fit_s = calibrate(
        dirs[args.calibrate_on], folder / "profile.json",
        "--router", models[args.calibrate_on], "--replicas", str(replicas),
        "--host-cores", str(args.host_cores),
    )  # fmt: skip
    runs: dict[str, list[BenchRun]] = {
        router: [
            load_run(d, router=models[router], replicas=replicas, host_cores=args.host_cores)
            for d in ds
        ]
        for router, ds in dirs.items()
        if router in models
    }
    common = set.intersection(
        *(completed_sessions(list(r.records)) for v in runs.values() for r in v)
    )
    live: dict[str, tuple[float, float]] = {}
    twin: dict[str, tuple[float, float]] = {}
    per_round: dict[str, list[float]] = {}
    placed: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    for router, v in runs.items():
        measured: list[TurnRecord] = []
        predicted: list[TurnRecord] = []
        per_round[router] = []
        placed[router] = []
        for k, run in enumerate(v):
            kept = [r for r in run.records if r.session in common]
            per_round[router].append(mean_makespan(kept))
            sim = [r for r in twin_simulation(run, profile).records if r.session in common]
            placed[router].append(placement(sim, replicas))
            for into, recs in ((measured, kept), (predicted, sim)):
                into += [msgspec.structs.replace(r, session=f"{k}/{r.session}") for r in recs]
        for into, out in ((measured, live), (predicted, twin)):
            s = summarise(into)
            assert s.cache.achieved_ratio is not None
            out[router] = (mean_makespan(into), s.cache.achieved_ratio)
    twin_s = time.perf_counter() - t0
    rounds = max(len(v) for v in runs.values())
    host = f"on {args.host_cores} shared cores" if args.host_cores else "on hardware of their own"
    print(f"{folder}: {replicas} replicas ({host} in the twin), {rounds} round(s), "
          f"{len(common)} sessions completed "
          f"by every run; profile fitted to {args.calibrate_on} in {fit_s:.1f} s, twins "
          f"{twin_s:.1f} s")  # fmt: skip
    best_live = min(m for m, _ in live.values())
    best_twin = min(m for m, _ in twin.values())
    w = max(12, *(len(r) for r in live))
    label = {r: models[r] + (" (fitted)" if r == args.calibrate_on else "")
             + (" (approx.)" if r in APPROXIMATE else "") for r in live}  # fmt: skip
    wm = max(20, *(len(x) for x in label.values()))
    print(f"{'router':<{w}} {'modelled by':<{wm}} {'makespan live':>13} {'per round':>15} "
          f"{'twin':>8} {'error':>7} {'vs best live':>12} {'twin':>6} {'cached live':>11} "
          f"{'twin':>7}  twin's prompt tokens per replica % per round")  # fmt: skip
    for router in rank({r: m for r, (m, _) in live.items()}):
        (lm, lc), (tm, tc) = live[router], twin[router]
        rounds_s = "/".join(f"{x:.1f}" for x in per_round[router])
        print(f"{router:<{w}} {label[router]:<{wm}} {lm:>12.2f}s {rounds_s:>15} "
              f"{tm:>7.2f}s {(tm - lm) / lm:>+7.1%} {lm / best_live:>11.3f}x "
              f"{tm / best_twin:>5.3f}x {lc:>11.1%} {tc:>7.1%}  {' '.join(placed[router])}")  # fmt: skip
    order_live = rank({r: m for r, (m, _) in live.items()})
    order_twin = rank({r: m for r, (m, _) in twin.items()})
    print(f"ranking by makespan, live: {' < '.join(order_live)}")
    print(f"ranking by makespan, twin: {' < '.join(order_twin)}")
    # A pair is decided live when every round puts it in the same order; the twin is held to
    # those pairs only (an order the rounds themselves disagree on is within this machine's noise).
    decided, undecided, wrong = 0, [], []
    for i, a in enumerate(order_live):
        for b in order_live[i + 1 :]:
            if all(x < y for x, y in zip(per_round[a], per_round[b], strict=True)):
                decided += 1
                if twin[a][0] >= twin[b][0]:
                    wrong.append(f"{a} < {b}")
            else:
                undecided.append(f"{a} ~ {b}")
    print(f"pairs every live round orders alike: {decided}; the twin orders "
          f"{decided - len(wrong)} of them alike" + (f" (not: {', '.join(wrong)})" if wrong else "")
          + (f"; undecided live: {', '.join(undecided)}" if undecided else ""))  # fmt: skip
    print(
        f"rankings {'agree' if order_live == order_twin else 'differ'} in full; "
        f"{'agree' if not wrong else 'DISAGREE'} on what the live rounds decide"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
