"""Routing policies with and without shared-prefix (cascade) decode attention, in the simulator.

The scenarios are ``benchmarks/policy_compare.py``'s (and the default run's,
:mod:`kvharness.sim.default`), near saturation: 16 replicas of H200 / Llama-3.3-70B (FP8 weights,
BF16 KV), every registered policy, on

* the synthetic agent fleet: 96 sessions on four repositories (``steps_median`` 30), Poisson
  arrivals at 0.2 sessions/s (load x1.0);
* the Mooncake conversation trace: its first 2,000 sessions, start times compressed x1.5.

Each policy runs twice: ``--attention default`` (paged; shared-prefix reads measured with
``shared_stats``, which changes no result) and ``--attention cascade``. Printed per policy:
goodput (sessions/h within 1.5x their lower bound), decode step p50 (steps that decode, mixed
ones included), the share of decode step time spent reading KV blocks shared within the decode
batch, and the cached ratio (cached prompt tokens / prompt tokens); then whether the best policy
changes with cascade. ``--quick``: 4 replicas and a quarter of the sessions (the Mooncake part
a tenth), for a run of a minute or two.

Run: ``nice -n 19 .venv/bin/python benchmarks/cascade_fleet.py --workers 2``.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext

# The same scenarios, loaded the same way (a script's folder is on its import path).
from policy_compare import _run, _workload

from kvharness.routing.registry import available_policies
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig
from kvharness.sim.summary import PolicyRow
from kvharness.sim.sweep import SimJob

ATTENTIONS = ("default", "cascade")


def _f(v: float | None, fmt: str, scale: float = 1.0) -> str:
    width = fmt.split(".")[0]
    return f"{'-':>{width}}" if v is None else format(v * scale, fmt)


def _table(key: str, rows: dict[tuple[str, str], PolicyRow], policies: list[str]) -> list[str]:
    head = (
        f"{'policy':20s} {'goodput/h':>17s} {'decode p50 (ms)':>17s} {'shared share':>15s} "
        f"{'cached ratio':>15s} {'hit/ideal':>13s}\n"
        f"{'':20s} {'default':>8s} {'cascade':>8s} {'default':>8s} {'cascade':>8s} "
        f"{'default':>7s} {'cascade':>7s} {'default':>7s} {'cascade':>7s} {'dflt':>6s} {'casc':>6s}"
    )
    out = [head]
    for p in policies:
        d, c = rows[p, "default"], rows[p, "cascade"]
        out.append(
            f"{p:20s} {_f(d.goodput, '8.1f')} {_f(c.goodput, '8.1f')} "
            f"{_f(d.decode_step_p50, '8.2f', 1e3)} {_f(c.decode_step_p50, '8.2f', 1e3)} "
            f"{_f(d.shared_prefix_share, '7.1%')} {_f(c.shared_prefix_share, '7.1%')} "
            f"{_f(d.cached_ratio, '7.3f')} {_f(c.cached_ratio, '7.3f')} "
            f"{_f(d.hit_ratio, '6.3f')} {_f(c.hit_ratio, '6.3f')}"
        )
    best = {a: max(policies, key=lambda p: rows[p, a].goodput or 0.0) for a in ATTENTIONS}
    gd = rows[best["default"], "default"].goodput or 0.0
    gc = rows[best["cascade"], "cascade"].goodput or 0.0
    verdict = "unchanged" if best["default"] == best["cascade"] else "CHANGES with cascade"
    out.append(
        f"best policy: {best['default']} ({gd:.1f}/h) with default attention, "
        f"{best['cascade']} ({gc:.1f}/h) with cascade: {verdict}"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--workloads", default="synthetic,mooncake", help="synthetic, mooncake (default: both)"
    )
    ap.add_argument("--policies", default="all", help="comma-separated policy names, or all")
    ap.add_argument("--workers", type=int, default=1, help="processes to run simulations in")
    ap.add_argument("--quick", action="store_true", help="4 replicas, fewer sessions: a short run")
    ap.add_argument("--synthetic-load", type=float, default=1.0, help="synthetic arrival x")
    ap.add_argument("--mooncake-load", type=float, default=1.5, help="Mooncake compression x")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error("--workers must be >= 1")
    keys = [k.strip() for k in args.workloads.split(",") if k.strip()]
    if not keys or set(keys) - {"synthetic", "mooncake"}:
        ap.error("--workloads: synthetic and/or mooncake")
    names = available_policies()
    policies = names if args.policies == "all" else args.policies.split(",")
    if set(policies) - set(names):
        ap.error(f"unknown policies; choose from {', '.join(names)}")
    replicas = 4 if args.quick else 16
    # What policy_compare's _workload reads from its own arguments.
    wl_args = argparse.Namespace(
        synthetic_sessions=96,
        mooncake_sessions=800 if args.quick else 2000,
        seed=0,
    )
    cluster = parse_cluster(f"{replicas}xH200:llama-3.3-70b")
    loads = {"synthetic": args.synthetic_load, "mooncake": args.mooncake_load}
    jobs, labels = [], []
    for k in keys:
        for p in policies:
            for a in ATTENTIONS:
                cfg = SimConfig(cluster, p, load=loads[k], attention=a, shared_stats=True)
                jobs.append((k, SimJob(k, cfg, deadline="1.5x"), wl_args, 0))
                labels.append((k, p, a))
    t0 = time.perf_counter()
    rows: dict[str, dict[tuple[str, str], PolicyRow]] = {k: {} for k in keys}
    with ProcessPoolExecutor(args.workers) if args.workers > 1 else nullcontext() as pool:
        done = pool.map(_run, jobs) if pool is not None else map(_run, jobs)
        for (_, row), (k, p, a) in zip(done, labels, strict=True):
            rows[k][p, a] = row
    wall = time.perf_counter() - t0
    for k in keys:
        wl = _workload(k, replicas, wl_args)
        print(
            f"\n== {wl.name}: {len(wl.sessions)} sessions, {wl.num_turns} turns, "
            f"{cluster.label()}, load x{loads[k]:g}, deadline 1.5x =="
        )
        print("\n".join(_table(k, rows[k], policies)))
    print(
        "\nshared share: decode step time spent reading KV blocks that several sequences of the "
        "same decode batch hold (at the achieved HBM bandwidth); under cascade they are read "
        "once a step"
    )
    print(f"{len(jobs)} simulations in {wall:.0f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
