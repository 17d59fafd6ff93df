"""The embedded default run (``kvharness bench`` with no target, ``make run``): the synthetic
coding-agent workload on a simulated H200 cluster under every routing policy, as one table."""

from __future__ import annotations

import sys
import time

from rich.console import Console

from kvharness.report.io import parse_deadline
from kvharness.routing.registry import available_policies
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig
from kvharness.sim.summary import PolicyRow, render_rows
from kvharness.sim.sweep import SimJob, run_sweep

__all__ = ["DEFAULT_CLUSTER", "DEFAULT_WORKLOAD", "run_default"]

DEFAULT_WORKLOAD = "synthetic:sessions=24,steps_median=40"
DEFAULT_CLUSTER = "4xH200:llama-3.3-70b:tp2"
DEFAULT_LOAD = 1.0
DEFAULT_DEADLINE = "1.5x"


def run_default(
    *,
    workload: str = DEFAULT_WORKLOAD,
    cluster: str = DEFAULT_CLUSTER,
    load: float = DEFAULT_LOAD,
    policies: list[str] | None = None,
    executor: str = "auto",
    jobs: int | None = None,
    console: Console | None = None,
) -> list[PolicyRow]:
    """Simulate ``workload`` on ``cluster`` under each policy (all by default), print the table and
    return its rows. Writes no files."""
    con = console or (Console() if sys.stdout.isatty() else Console(width=140))
    names = policies or available_policies()
    deadline = parse_deadline(DEFAULT_DEADLINE)
    spec = parse_cluster(cluster)
    runs = [
        SimJob(workload, SimConfig(spec, p, load=load), deadline=DEFAULT_DEADLINE) for p in names
    ]
    con.print(
        f"simulating {workload!r} on {cluster} under {len(names)} routing policies "
        "(virtual time; kvharness sim --help for more)",
        style="dim",
    )
    t0 = time.perf_counter()
    rows = run_sweep(runs, executor=executor, jobs=jobs)
    wall = time.perf_counter() - t0
    title = f"{rows[0].cluster} · {workload} · load x{load:g}" if rows else workload
    con.print(render_rows(rows, deadline, title))
    sim = max((r.sim_seconds for r in rows), default=0.0)
    con.print(f"{len(rows)} runs, up to {sim:,.0f} simulated s each, in {wall:.1f} s", style="dim")
    return rows
