"""Long-horizon agents on a 16-replica fleet: what KV retention and routing do for sessions of
hundreds to thousands of turns over hours of tool time, compacted at the window.

The workload is the long-horizon generator (:mod:`kvharness.workload.long_horizon`: 500 to 2,000
turns a session, a tool gap of 8 s median with a long tail, the context summarized when it nears
80% of a 128k window, a 12,000-token repository map shared by the sessions on one repository).
Three retention setups, each under every policy asked for:

* ``lru``: vLLM's eviction, least recently used free block first;
* ``ttl``: a session's blocks pinned while its tool runs (``--eviction ttl``);
* ``lru+cpu``: LRU with a host-memory tier per replica (``--cpu-blocks`` blocks; evicted blocks
  move there and come back at PCIe cost instead of being recomputed).

One row each: goodput (sessions per hour within ``--deadline`` of their lower bound), TTFT p50 and
p99, cached prompt tokens over the ideal, preemptions. Then, per policy, the best setup.

Short by default (32 sessions; about five minutes with ``--workers 2``); ``--sessions`` and
``--cluster`` scale it. Say which when quoting figures.

Run: ``.venv/bin/python benchmarks/long_horizon_sim.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from kvharness.report.io import parse_deadline
from kvharness.routing.registry import available_policies
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig
from kvharness.sim.summary import PolicyRow
from kvharness.sim.sweep import SimJob, run_job

SETUPS = ("lru", "ttl", "lru+cpu")


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="16xH200:llama-3.3-70b", help="replicas x hardware:model")
    ap.add_argument(
        "--policies", default="agent_aware,sglang_cache_aware,round_robin",
        help="comma-separated policy names, or all",
    )  # fmt: skip
    ap.add_argument("--sessions", type=int, default=32, help="long-horizon sessions")
    ap.add_argument("--compaction", default="summarize", help="summarize, drop-outputs, keep-last")
    ap.add_argument("--rate", type=float, default=0.05, help="session arrivals per second")
    ap.add_argument(
        "--cpu-blocks", type=int, default=200_000,
        help="host-memory tier per replica for lru+cpu, blocks (an estimate of a host's spare RAM)",
    )  # fmt: skip
    ap.add_argument("--deadline", default="1.5x", help="seconds or a factor x the lower bound")
    ap.add_argument("--seed", type=int, default=0, help="workload seed")
    ap.add_argument("--workers", type=int, default=1, help="processes to run simulations in")
    args = ap.parse_args(argv)
    names = available_policies()
    policies = names if args.policies == "all" else args.policies.split(",")
    unknown = [p for p in policies if p not in names]
    if unknown:
        ap.error(f"unknown policies {', '.join(unknown)}; choose from {', '.join(names)}")
    parse_deadline(args.deadline)
    cluster = parse_cluster(args.cluster)
    spec = (
        f"long-horizon:sessions={args.sessions},compaction={args.compaction},"
        f"rate={args.rate:g},seed={args.seed}"
    )
    grid = [(setup, p) for setup in SETUPS for p in policies]
    jobs = [
        SimJob(
            spec,
            SimConfig(
                cluster,
                p,
                eviction="ttl" if setup == "ttl" else "lru",
                cpu_tier_blocks=args.cpu_blocks if setup == "lru+cpu" else 0,
            ),
            deadline=args.deadline,
        )
        for setup, p in grid
    ]
    print(f"{len(jobs)} simulations: {args.cluster}, {spec}, deadline {args.deadline}",
          file=sys.stderr)  # fmt: skip
    t0 = time.perf_counter()
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(run_job, jobs))
    else:
        rows = [run_job(j) for j in jobs]
    by: dict[str, list[tuple[str, PolicyRow]]] = {}
    print(f"\n{rows[0].cluster} · {rows[0].sessions} sessions, {rows[0].turns} calls · {spec}")
    print(f"  {'setup':<8} {'policy':<20} {'goodput/h':>9} {'in time':>9} {'TTFT p50':>8} "
          f"{'p99':>7} {'hit/ideal':>9} {'preempt':>8}")  # fmt: skip
    for (setup, policy), r in zip(grid, rows, strict=True):
        by.setdefault(policy, []).append((setup, r))
        print(
            f"  {setup:<8} {policy:<20} {_f(r.goodput, '.1f'):>9} "
            f"{f'{r.sessions_within_deadline}/{r.sessions}':>9} {_f(r.ttft_p50, '.3f'):>8} "
            f"{_f(r.ttft_p99, '.2f'):>7} {_f(r.hit_ratio, '.3f'):>9} {r.preemptions:>8}"
        )
    for policy, items in by.items():
        setup, best = max(items, key=lambda x: (x[1].goodput or 0.0, x[1].hit_ratio or 0.0))
        print(f"{policy}: best retention {setup} ({_f(best.goodput, '.1f')}/h, hit/ideal "
              f"{_f(best.hit_ratio, '.3f')})")  # fmt: skip
    print(f"{len(jobs)} simulations in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
