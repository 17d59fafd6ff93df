"""`kvharness bench capacity` and `kvharness sim capacity`: the most concurrent agent sessions a
deployment holds within an SLO tier, searched live or in the simulator
(:mod:`kvharness.report.capacity`).

Each point of the search is a run of ``--sessions-per-slot`` x N sessions of the workload with N
in flight (``kvharness bench --concurrency N --reset-cache``, or its simulation), so that most of
the run is spent at that load; the search doubles N until a run misses the tier, then bisects.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from kvharness.cli._args import output_dir, positive_int

__all__ = ["add_search_options", "print_search", "run_bench_capacity", "run_sim_capacity"]


def add_search_options(p: argparse.ArgumentParser) -> None:
    """The search's own options (the tier, how far, how long each point runs)."""
    p.add_argument(
        "--tier",
        default="standard",
        help="the SLO tier: relaxed (TTFT p90 10 s, 10 tok/s), standard (5 s, 20 tok/s), fast "
        "(2 s, 50 tok/s), premium (1 s, 100 tok/s), or ttft=SECONDS,speed=TOK_S; met when the "
        "turns' TTFT p90 is within it and their output speed p10 at least it (default: "
        "%(default)s)",
    )
    p.add_argument(
        "--max-concurrency",
        type=positive_int,
        default=64,
        help="the most sessions in flight to try (default: %(default)s)",
    )
    p.add_argument(
        "--sessions-per-slot",
        type=positive_int,
        default=3,
        help="sessions per session in flight in each point's run, so it runs mostly at that "
        "load (default: %(default)s)",
    )


def print_search(
    title: str, best: int, points: Sequence[Any], tier: Any, per: Sequence[tuple[str, float]]
) -> None:
    """The points tried and the answer, with agents per unit (replica, GPU) for each of
    ``per`` (name, units)."""
    table = Table(title=title)
    for col in ("sessions in flight", "turns", "TTFT p90", "speed p10", "failed", "meets"):
        table.add_column(col, justify="right")
    for p in sorted(points, key=lambda p: p.concurrency):
        table.add_row(
            str(p.concurrency), str(p.turns), f"{p.ttft_p90_s:.3f} s",
            f"{p.speed_p10_tok_s:.1f} tok/s", str(p.failed), "yes" if p.meets else "no",
        )  # fmt: skip
    Console().print(table)
    units = ", ".join(f"{best / n:.2f} per {name}" for name, n in per)
    print(f"capacity at {tier}: {best} concurrent sessions ({units})")


def _save(out: Path, best: int, points: Sequence[Any], tier: Any, extra: dict[str, Any]) -> None:
    doc = {
        "tier": dataclasses.asdict(tier),
        "capacity": best,
        "points": [dataclasses.asdict(p) for p in points],
        **extra,
    }
    (out / "capacity.json").write_text(json.dumps(doc, indent=2) + "\n")


def run_bench_capacity(args: argparse.Namespace, config: Callable[[int], Any]) -> int:
    """The live search: ``config(n)`` is the bench configuration of the point at ``n``."""
    from kvharness.bench.run import reset_prefix_cache, run_bench
    from kvharness.report.capacity import measure, parse_tier, search

    tier = parse_tier(args.tier)
    out = output_dir(args.out or Path("runs") / "capacity", "--out")
    out.mkdir(parents=True, exist_ok=True)
    cfg0 = config(1)

    def evaluate(n: int) -> Any:
        cfg = config(n)
        for engine in cfg.scraped:
            reset_prefix_cache(engine)
        result = run_bench(cfg, out / f"c{n}")
        point = measure(n, result.records, tier)
        print(
            f"  {n} in flight: TTFT p90 {point.ttft_p90_s:.3f} s, speed p10 "
            f"{point.speed_p10_tok_s:.1f} tok/s: {'meets' if point.meets else 'misses'} {tier.name}",
            file=sys.stderr,
        )
        return point

    best, points = search(evaluate, max_concurrency=args.max_concurrency)
    replicas = args.replicas or len(cfg0.backends)
    _save(out, best, points, tier, {"workload": cfg0.workload, "replicas": replicas})
    print_search(f"live capacity: {cfg0.workload}", best, points, tier, [("replica", replicas)])
    return 0


def run_sim_capacity(args: argparse.Namespace) -> int:
    """The search in the simulator, on a measured profile or a preset cluster."""
    from kvharness.bench.config import BenchConfig
    from kvharness.report.capacity import measure, parse_tier, search
    from kvharness.sim.cluster import parse_cluster
    from kvharness.sim.twin import simulate_bench

    tier = parse_tier(args.tier)
    cluster = parse_cluster(args.cluster, block_size=args.block_size or 128)
    out = output_dir(args.out or Path("runs") / "sim-capacity", "--out")
    out.mkdir(parents=True, exist_ok=True)
    policy = args.policy if args.policy != "all" else "agent_aware"

    def evaluate(n: int) -> Any:
        cfg = BenchConfig(
            backends=tuple(f"http://replica-{i}" for i in range(cluster.replicas)),
            workload=args.workload,
            arrival="concurrent",
            concurrency=n,
            max_sessions=args.sessions_per_slot * n,
            time_scale=args.time_scale,
        )
        router = None if cluster.replicas == 1 else policy
        result = simulate_bench(cfg, cluster, router, host_cores=args.host_cores)
        return measure(n, result.records, tier)

    best, points = search(evaluate, max_concurrency=args.max_concurrency)
    dep = cluster.deployment
    per = [("replica", float(cluster.replicas))]
    if dep.profile is None:
        per.append(("GPU", float(cluster.replicas * dep.tp)))
    _save(out, best, points, tier, {"workload": args.workload, "cluster": cluster.label()})
    print_search(f"simulated capacity: {cluster.label()}, {args.workload}", best, points, tier, per)
    return 0
