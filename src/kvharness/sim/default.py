"""The embedded default run (``kvharness bench`` with no target, ``make run``): a coding-agent
fleet on a simulated H200 cluster under every routing policy, at a light load and near saturation,
one table each, then what routing changed at each load.

The fleet is ``benchmarks/policy_compare.py``'s synthetic scenario: 96 agent sessions on four
repositories, arriving at random (0.2 sessions a second at load 1), each a lognormal number of
model calls (median 30) that re-send one shared system prompt, their repository's context and a
growing history, separated by tool runs of the generator's tool mix (reads and greps in tens of
milliseconds, test runs in seconds with a heavy tail), on 16 replicas of Llama-3.3-70B on one
H200 each. Light is a quarter of that arrival rate; near saturation is the rate itself, where the
replicas' KV caches and batches are full enough that where a turn goes decides whether its
session meets its deadline.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kvharness.report.io import parse_deadline
from kvharness.routing.registry import available_policies
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig
from kvharness.sim.summary import PolicyRow, render_rows
from kvharness.sim.sweep import SimJob, run_sweep

__all__ = ["DEFAULT_CLUSTER", "DEFAULT_LOADS", "DEFAULT_WORKLOAD", "run_default"]

DEFAULT_WORKLOAD = "synthetic:sessions=96,steps_median=30"
DEFAULT_CLUSTER = "16xH200:llama-3.3-70b"
DEFAULT_LOADS = {"light": 0.25, "near saturation": 1.0}
DEFAULT_DEADLINE = "1.5x"
OURS = "agent_aware"


def run_default(
    *,
    workload: str = DEFAULT_WORKLOAD,
    cluster: str = DEFAULT_CLUSTER,
    loads: dict[str, float] | None = None,
    policies: list[str] | None = None,
    executor: str = "auto",
    jobs: int | None = None,
    console: Console | None = None,
) -> list[PolicyRow]:
    """Simulate ``workload`` on ``cluster`` under each policy (all by default) at each of
    ``loads`` (name -> arrival-rate multiplier), print a table per load and the comparison of
    agent_aware with the best other policy at each, and return the rows. Writes no files."""
    con = console or (Console() if sys.stdout.isatty() else Console(width=140))
    names = policies or available_policies()
    levels = loads or DEFAULT_LOADS
    deadline = parse_deadline(DEFAULT_DEADLINE)
    spec = parse_cluster(cluster)
    runs = [
        SimJob(workload, SimConfig(spec, p, load=load), deadline=DEFAULT_DEADLINE)
        for load in levels.values()
        for p in names
    ]
    con.print(
        f"simulating {workload!r} on {cluster} under {len(names)} routing policies at "
        f"{len(levels)} loads (virtual time; kvharness sim --help for more)",
        style="dim",
    )
    t0 = time.perf_counter()
    with Progress(
        TextColumn("[dim]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=con,
        transient=True,
        disable=not con.is_terminal,
    ) as bar:
        task = bar.add_task("simulating", total=len(runs))
        rows = run_sweep(
            runs, executor=executor, jobs=jobs, on_row=lambda _job, _row: bar.advance(task)
        )
    wall = time.perf_counter() - t0
    by_load = [rows[i * len(names) : (i + 1) * len(names)] for i in range(len(levels))]
    for (level, load), table in zip(levels.items(), by_load, strict=True):
        title = f"{table[0].cluster} · {workload} · {level}, load x{load:g}" if table else workload
        con.print(render_rows(table, deadline, title))
    for (level, load), table in zip(levels.items(), by_load, strict=True):
        line = _versus(table, level, load)
        if line:
            con.print(line)
    sim = max((r.sim_seconds for r in rows), default=0.0)
    con.print(f"{len(rows)} runs, up to {sim:,.0f} simulated s each, in {wall:.1f} s", style="dim")
    return rows


def _versus(rows: Sequence[PolicyRow], level: str, load: float) -> str | None:
    """agent_aware's goodput against the best other policy's at one load, in a line."""
    ours = next((r for r in rows if r.policy == OURS), None)
    peers = [r for r in rows if r.policy != OURS and r.goodput is not None]
    if ours is None or ours.goodput is None or not peers:
        return None
    best = max(peers, key=lambda r: r.goodput or 0.0)
    ratio = f"{ours.goodput / best.goodput:.2f}x" if best.goodput else "-"
    return (
        f"{level} (load x{load:g}): {OURS} {ours.goodput:.1f} sessions/h within the deadline "
        f"against {best.goodput:.1f} for the best other policy, {best.policy}: {ratio}"
    )
