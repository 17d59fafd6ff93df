"""Routing policy comparison in the simulator.

Replicas of H200 / Llama-3.3-70B (FP8 weights, BF16 KV), 16 by default or each size of
``--replicas``, every registered policy, on two workloads at three loads (light, near saturation,
overload). Prints, per workload, cluster size and load, one row per policy: session goodput
(sessions per hour finished within ``--deadline`` of their lower bound), TTFT p50/p99, hit ratio
achieved / ideal; then ours (``agent_aware``, its default) against the best peer, with the
targets (goodput >= 1.2x the best peer near saturation, never below it, hit ratio >= 0.9 of
ideal). With ``--compute-weights``, agent_aware also runs with each of these hand-set
``compute_weight`` values, and the default is held to the best of them (within 3% of its
goodput).

Scaled down to run in minutes on a small machine (say so when quoting figures). The sizes below
are those of 16 replicas; another cluster size scales the sessions and their arrival rate with
it, so each replica sees the same load (and a smaller cluster draws as many more synthetic
workloads, so that one session is not a large share of its goodput):

* synthetic: ``--synthetic-sessions`` sessions (default 96) with ``steps_median`` 30 instead of 70
  (contexts still grow to 40-80k tokens); the load multiplies its Poisson session arrival rate
  (0.2 sessions/s at load 1).
* Mooncake conversation trace: the first ``--mooncake-sessions`` sessions by start time (default
  2,000 of 8,099, at most all of them); the load compresses the trace's session start times (the
  gaps between the turns of a session stay as recorded).

``--cpu-tier-blocks N`` gives every replica (for every policy alike) a host-memory KV offload tier
of N engine blocks (vLLM CPU offload / LMCache), loaded back at PCIe bandwidth; 0 (default) = none.

Run: ``.venv/bin/python benchmarks/policy_compare.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import msgspec

from kvharness.routing.registry import available_policies, parse_policy_options
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig
from kvharness.sim.summary import PolicyRow
from kvharness.sim.sweep import SimJob, run_job
from kvharness.workload.load import load_workload
from kvharness.workload.model import Workload

OURS = "agent_aware"
BASELINES = ("round_robin", "least_outstanding")
TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "mooncake"
LOAD_NAMES = ("light", "near saturation", "overload")


BASE_REPLICAS = 16
"""The cluster size the session counts and rates are given for."""


@functools.cache
def _mooncake_trace() -> Workload:
    """The whole Mooncake conversation trace, read once per process (each cluster size keeps
    a part of it)."""
    return load_workload(str(TRACE / "conversation_trace.jsonl"))


def _mooncake(sessions: int, replicas: int) -> Workload:
    """The first ``sessions`` x replicas / 16 sessions of the trace, their start times scaled so
    that each replica gets the session arrival rate of the first ``sessions`` on 16 replicas."""
    wl = _mooncake_trace()
    starts = wl.arrival.start_times(wl.sessions)
    by_start = sorted(range(len(wl.sessions)), key=lambda i: (starts[i], i))
    n = min(len(by_start), max(1, round(sessions * replicas / BASE_REPLICAS)))
    kept = tuple(wl.sessions[i] for i in sorted(by_start[:n]))
    span = starts[by_start[n - 1]] - starts[by_start[0]]
    base = min(len(by_start), sessions)
    base_span = starts[by_start[base - 1]] - starts[by_start[0]]
    # per replica: n / (span x scale x replicas) = base / (base_span x 16)
    scale = n * base_span * BASE_REPLICAS / (span * replicas * base) if span and base else 1.0
    arrival = replace(wl.arrival, time_scale=wl.arrival.time_scale * scale)
    return replace(
        wl, sessions=kept, arrival=arrival, name=f"mooncake-conversation[{len(kept)} sessions]"
    )


_WORKLOADS: dict[tuple[str, int, int], Workload] = {}


def _workload(key: str, replicas: int, args: argparse.Namespace, seed: int = 0) -> Workload:
    """Workload ``key`` for ``replicas`` (the synthetic one drawn with ``args.seed + seed``)."""
    if key != "synthetic":
        seed = 0
    if (key, replicas, seed) not in _WORKLOADS:
        if key == "synthetic":
            n = max(1, round(args.synthetic_sessions * replicas / BASE_REPLICAS))
            rate = 0.2 * replicas / BASE_REPLICAS
            spec = f"synthetic:sessions={n},steps_median=30,rate={rate:g},seed={args.seed + seed}"
            _WORKLOADS[key, replicas, seed] = load_workload(spec)
        else:
            _WORKLOADS[key, replicas, seed] = _mooncake(args.mooncake_sessions, replicas)
    return _WORKLOADS[key, replicas, seed]


def _run(job: tuple[str, SimJob, argparse.Namespace, int]) -> tuple[str, PolicyRow]:
    key, sim, args, seed = job
    return key, run_job(sim, _workload(key, sim.config.cluster.replicas, args, seed))


def _seeds(key: str, replicas: int, args: argparse.Namespace) -> int:
    """Synthetic workloads drawn for a scenario: ``--seeds``, times 16 / replicas on a smaller
    cluster (as many sessions in all as on 16 replicas)."""
    if key != "synthetic":
        return 1
    return args.seeds * max(1, round(BASE_REPLICAS / replicas))


def _mean(rows: list[PolicyRow]) -> PolicyRow:
    """Runs of one scenario on different seeds as one row: means of the figures, sums of the
    counts."""

    def mean(name: str) -> float | None:
        values = [getattr(r, name) for r in rows if getattr(r, name) is not None]
        return sum(values) / len(values) if values else None

    return msgspec.structs.replace(
        rows[0],
        sessions=sum(r.sessions for r in rows),
        sessions_within_deadline=sum(r.sessions_within_deadline for r in rows),
        preemptions=sum(r.preemptions for r in rows),
        goodput=mean("goodput"),
        ttft_p50=mean("ttft_p50"),
        ttft_p99=mean("ttft_p99"),
        bound_ratio_mean=mean("bound_ratio_mean"),
        hit_ratio=mean("hit_ratio"),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--workloads",
        default="synthetic,mooncake",
        help="comma-separated: synthetic, mooncake (default: both)",
    )
    ap.add_argument(
        "--synthetic-loads",
        default="0.25,1,4",
        help="three arrival-rate multipliers for the synthetic workload (light, near saturation, overload)",
    )
    ap.add_argument(
        "--mooncake-loads",
        default="0.25,1.5,4",
        help="three trace-compression factors for the Mooncake trace (light, near saturation, overload)",
    )
    ap.add_argument("--policies", default="all", help="comma-separated policy names, or all")
    ap.add_argument("--cluster", default="16xH200:llama-3.3-70b", help="replicas x hardware:model")
    ap.add_argument(
        "--replicas",
        default="",
        help="cluster sizes, comma-separated (e.g. 4,16,64), replacing --cluster's; sessions and "
        "arrival rates scale with each (default: --cluster's)",
    )
    ap.add_argument(
        "--compute-weights",
        default="",
        help=f"also run {OURS} with each of these hand-set compute_weight values, comma-separated "
        "(e.g. 0,0.25,0.5,1,2), and hold its default to the best of them",
    )
    ap.add_argument(
        "--deadline", default="1.5x", help="session deadline: seconds or a factor x its lower bound"
    )
    ap.add_argument("--synthetic-sessions", type=int, default=96, help="synthetic sessions")
    ap.add_argument(
        "--mooncake-sessions",
        type=int,
        default=2000,
        help="Mooncake sessions kept (earliest first)",
    )
    ap.add_argument("--seed", type=int, default=0, help="synthetic workload seed (the first)")
    ap.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="synthetic workloads drawn per scenario (seeds --seed, --seed + 1, ...); figures are "
        "their means, sessions and preemptions their sums (default 1)",
    )
    ap.add_argument("--workers", type=int, default=1, help="processes to run simulations in")
    ap.add_argument(
        "--cpu-tier-blocks",
        type=int,
        default=0,
        help="host-memory KV offload tier per replica, in engine blocks of the workload's block "
        "size (Mooncake: 512 tokens, synthetic: 128), the same for every policy; 0 = none "
        "(default). A realistic size for the simulated cluster (TP1, bf16 KV = 80 layers x 8 KV "
        "heads x 128 dims x 2 (K,V) x 2 B = 320 KiB/token, 160 MiB per 512-token block): an "
        "8xH200 node has ~2 TB host RAM, i.e. ~250 GB per replica, ~200 GB of it for KV = "
        "~610k tokens = 1200 blocks of 512 tokens (4800 of 128)",
    )
    ap.add_argument(
        "--capacity-check",
        action="store_true",
        help="instead: hit ratio vs ideal on the Mooncake trace at its light load with each "
        "replica's KV capacity x1 and x8 (is the cache size what bounds it?)",
    )
    ap.add_argument(
        "--policy-option",
        action="append",
        default=[],
        help=f"KEY=VALUE option of {OURS} (repeatable), e.g. move_ratio=2 (default: none)",
    )
    args = ap.parse_args(argv)
    if args.cpu_tier_blocks < 0:
        ap.error("--cpu-tier-blocks must be >= 0")
    if args.capacity_check:
        return _capacity_check(args)

    policies = available_policies() if args.policies == "all" else args.policies.split(",")
    unknown = set(policies) - set(available_policies())
    if unknown:
        ap.error(f"unknown policies: {', '.join(sorted(unknown))}")
    loads = {
        "synthetic": [float(x) for x in args.synthetic_loads.split(",")],
        "mooncake": [float(x) for x in args.mooncake_loads.split(",")],
    }
    keys = [k.strip() for k in args.workloads.split(",") if k.strip()]
    for k in keys:
        if k not in loads:
            ap.error(f"unknown workload {k!r}: synthetic or mooncake")
        if len(loads[k]) != 3:
            ap.error(f"give three loads for {k}")

    try:
        ours_options = parse_policy_options(args.policy_option)
    except ValueError as err:
        ap.error(f"--policy-option: {err}")
    base = parse_cluster(args.cluster)
    try:
        sizes = [int(x) for x in args.replicas.split(",") if x.strip()] or [base.replicas]
        weights = [float(x) for x in args.compute_weights.split(",") if x.strip()]
    except ValueError as err:
        ap.error(f"--replicas and --compute-weights take comma-separated numbers: {err}")
    if any(n < 1 for n in sizes) or any(w < 0 for w in weights):
        ap.error("--replicas must be >= 1 and --compute-weights >= 0")
    # (label, policy, options): the peers, ours at its default, ours at each hand-set weight.
    variants = [(p, p, ours_options if p == OURS else {}) for p in policies]
    if OURS in policies:
        variants += [(_swept(w), OURS, {**ours_options, "compute_weight": w}) for w in weights]
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    jobs, labels = [], []
    for k in keys:
        for n in sizes:
            for load in loads[k]:
                for (label, policy, options), seed in itertools.product(
                    variants, range(_seeds(k, n, args))
                ):
                    config = SimConfig(
                        replace(base, replicas=n),
                        policy,
                        policy_options=options,
                        cpu_tier_blocks=args.cpu_tier_blocks,
                        load=load,
                    )
                    jobs.append((k, SimJob(k, config, deadline=args.deadline), args, seed))
                    labels.append(label)
    t0 = time.perf_counter()
    runs: dict[tuple[str, int, float, str], list[PolicyRow]] = {}
    with ProcessPoolExecutor(args.workers) if args.workers > 1 else nullcontext() as pool:
        done = pool.map(_run, jobs) if pool is not None else map(_run, jobs)
        for (key, row), label, job in zip(done, labels, jobs, strict=True):
            runs.setdefault((key, job[1].config.cluster.replicas, row.load, label), []).append(row)
    rows = {scenario: _mean(seeded) for scenario, seeded in runs.items()}
    wall = time.perf_counter() - t0

    verdicts: list[str] = []
    names = [label for label, _, _ in variants]
    for k in keys:
        for n in sizes:
            wl = _workload(k, n, args)
            seeds = f" x {_seeds(k, n, args)} seeds" if _seeds(k, n, args) > 1 else ""
            print(
                f"\n== {wl.name}{seeds}: {len(wl.sessions)} sessions, {wl.num_turns} turns, "
                f"{replace(base, replicas=n).label()}, deadline {args.deadline}, "
                f"{_tier(args, wl.block_size)} =="
            )
            for name, load in zip(LOAD_NAMES, loads[k], strict=True):
                print(f"-- load {load:g} ({name}) --")
                print(
                    f"{'policy':22s} {'goodput/h':>10s} {'in time':>9s} {'TTFT p50':>9s} "
                    f"{'TTFT p99':>9s} {'hit/ideal':>9s} {'span/LB':>8s} {'preempt':>8s}"
                )
                for label in names:
                    r = rows[(k, n, load, label)]
                    print(
                        f"{label:22s} {_f(r.goodput, '10.1f')} "
                        f"{r.sessions_within_deadline:>4d}/{r.sessions:<4d} "
                        f"{_f(r.ttft_p50, '9.2f')} {_f(r.ttft_p99, '9.2f')} "
                        f"{_f(r.hit_ratio, '9.3f')} {_f(r.bound_ratio_mean, '8.2f')} "
                        f"{r.preemptions:8d}"
                    )
                if OURS in policies:
                    here = {label: rows[(k, n, load, label)] for label in names}
                    verdicts.append(_verdict(f"{k} x{n}", name, load, policies, here, weights))
    if verdicts:
        print("\n== ours vs best peer ==")
        for v in verdicts:
            print(v)
    print(f"\n{len(jobs)} simulations in {wall:.0f} s wall")
    return 0


def _capacity_check(args: argparse.Namespace) -> int:
    from kvharness.sim.cluster import parse_cluster
    from kvharness.sim.simulator import SimConfig, Simulator

    wl = _workload("mooncake", BASE_REPLICAS, args)
    load = float(args.mooncake_loads.split(",")[0])
    cluster = parse_cluster(args.cluster, block_size=wl.block_size)
    base = cluster.deployment.kv_capacity_blocks
    print(
        f"{wl.name}, load {load:g}, {args.cluster}: {base} KV blocks of {wl.block_size} tokens, "
        f"{_tier(args, wl.block_size)}"
    )
    for policy in ("llmd_precise", "dynamo_kv", OURS):
        for scale in (1, 8):
            cfg = SimConfig(
                cluster,
                policy,
                load=load,
                num_blocks=base * scale,
                cpu_tier_blocks=args.cpu_tier_blocks,
            )
            res = Simulator(wl, cfg).run()
            ok = [r for r in res.records if r.ok and r.cached_tokens is not None]
            cached = sum(r.cached_tokens or 0 for r in ok)
            ideal = sum(r.ideal_cached_tokens for r in ok)
            print(f"{policy:14s} KV x{scale}: hit/ideal {cached / ideal:.3f}")
    return 0


def _swept(weight: float) -> str:
    return f"{OURS}[cw={weight:g}]"


def _verdict(
    scenario: str,
    name: str,
    load: float,
    policies: list[str],
    rows: dict[str, PolicyRow],
    weights: list[float],
) -> str:
    """One line: ours against the best peer (and against the best hand-set weight, if swept)."""
    ours = rows[OURS]
    peers = [rows[p] for p in policies if p != OURS]
    best = max(peers, key=lambda r: r.goodput or 0.0)
    ratio = (ours.goodput or 0.0) / best.goodput if best.goodput else float("inf")
    target = 1.2 if name == "near saturation" else 1.0
    hit = ours.hit_ratio or 0.0
    goodput_ok = ratio >= target * (1 - 1e-9)
    line = (
        f"{scenario:15s} load {load:<4g} {name:16s} goodput {ours.goodput or 0:8.1f} vs "
        f"{best.policy} {best.goodput or 0:8.1f} = {ratio:.3f}x (target >= {target:g}x: "
        f"{'met' if goodput_ok else 'MISSED'}); hit/ideal {hit:.3f} (target >= 0.9: "
        f"{'met' if hit >= 0.9 else 'MISSED'})"
    )
    if weights:
        top = max(weights, key=lambda w: rows[_swept(w)].goodput or 0.0)
        g = rows[_swept(top)].goodput or 0.0
        vs = (ours.goodput or 0.0) / g if g else float("inf")
        line += (
            f"; vs best cw={top:g} {g:.1f}: {vs:.3f}x (target >= 0.97x: "
            f"{'met' if vs >= 0.97 - 1e-9 else 'MISSED'})"
        )
    return line


def _tier(args: argparse.Namespace, block_size: int) -> str:
    """The header's description of the CPU offload tier (per replica)."""
    from kvharness.sim.cluster import parse_cluster

    n = args.cpu_tier_blocks
    if n == 0:
        return "no CPU KV tier"
    dep = parse_cluster(args.cluster, block_size=block_size).deployment
    return (
        f"CPU KV tier {n} blocks/replica ({n * block_size / 1e3:.0f}k tokens, "
        f"{n * dep.block_bytes / 1e9:.0f} GB, {dep.hardware.pcie_bandwidth / 1e9:.0f} GB/s PCIe)"
    )


def _f(v: float | None, fmt: str) -> str:
    return f"{'-':>{fmt.split('.')[0]}}" if v is None else format(v, fmt)


if __name__ == "__main__":
    sys.exit(main())
