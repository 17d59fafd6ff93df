"""Simulator speed: simulated seconds per wall second and turns per wall second.

H200 / Llama-3.3-70B replicas (FP8 weights, TP1), round robin, at a load where round robin
saturates (its sessions take well over their lower bound), on the synthetic coding-agent
workload (sessions scale with the replicas) and on the Mooncake conversation trace (arrivals
compressed by --trace-load). Times cover the simulation only (not loading the workload); CPU
time (this process) is printed beside wall time because wall time on a shared machine is not
the simulator's.

    .venv/bin/python benchmarks/sim_speed.py [--replicas 4,16,64] [--which synthetic,trace]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig, Simulator
from kvharness.workload.load import load_workload
from kvharness.workload.model import Workload

TRACE = (
    Path(__file__).resolve().parents[1]
    / ".."
    / "shared"
    / "traces"
    / "mooncake"
    / "conversation_trace.jsonl"
)


def synthetic(replicas: int) -> Workload:
    return load_workload(
        f"synthetic:sessions={8 * replicas},rate={0.05 * replicas:g},steps_median=30,"
        "max_context=120000,seed=1"
    )


def measure(
    wl: Workload, replicas: int, load: float, policy: str, block_size: int | None = None
) -> str:
    cluster = parse_cluster(
        f"{replicas}xH200:llama-3.3-70b", block_size=block_size or wl.block_size
    )
    sim = Simulator(wl, SimConfig(cluster, policy, load=load))
    t0, c0 = time.perf_counter(), time.process_time()
    res = sim.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ok = [r for r in res.records if r.ok]
    lb = sum(res.lower_bounds.values())
    spans: dict[str, list[float]] = {}
    for r in ok:
        s = spans.setdefault(r.session, [r.intended, r.done or r.intended])
        s[0] = min(s[0], r.intended)
        s[1] = max(s[1], r.done or r.intended)
    span = sum(b - a for a, b in spans.values())
    blocks = sum(r.pool.allocated for r in sim.replicas) / max(1, len(res.records))
    return (
        f"{replicas:>4} {len(res.records):>7} {res.end_time:>9.0f} {wall:>7.1f} {cpu:>7.1f} "
        f"{res.end_time / wall:>8.0f}x {res.end_time / cpu:>8.0f}x {len(res.records) / cpu:>8.0f} "
        f"{res.engine_steps:>10} {res.events:>8} {blocks:>8.0f} {span / lb if lb else 0:>7.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--replicas", default="4,16,64", help="cluster sizes, comma-separated")
    ap.add_argument("--which", default="synthetic,trace", help="workloads: synthetic, trace")
    ap.add_argument(
        "--trace-load",
        type=float,
        default=None,
        help="arrival multiplier for the trace (default: replicas / 4)",
    )
    ap.add_argument(
        "--block-size", type=int, default=None, help="engine block size (default: the workload's)"
    )
    ap.add_argument("--policy", default="round_robin", help="routing policies, comma-separated")
    args = ap.parse_args()
    sizes = [int(x) for x in args.replicas.split(",")]
    head = f"{'repl':>4} {'turns':>7} {'sim s':>9} {'wall s':>7} {'cpu s':>7} {'sim/wall':>9} {'sim/cpu':>9} {'turns/cpu-s':>8} {'steps':>10} {'events':>8} {'blk/turn':>8} {'span/LB':>7}"
    for which in args.which.split(","):
        trace = load_workload(str(TRACE)) if which == "trace" else None
        for policy in args.policy.split(","):
            print(f"\n{which} ({policy})")
            print(head)
            for n in sizes:
                if trace is not None:
                    print(
                        measure(trace, n, args.trace_load or n / 4, policy, args.block_size),
                        flush=True,
                    )
                else:
                    print(measure(synthetic(n), n, 1.0, policy, args.block_size), flush=True)


if __name__ == "__main__":
    main()
