"""Sweeps: policies x loads x cluster sizes, run in parallel (Ray when asked for or installed, else
a local process pool), each run written as a run directory (records, config, summary, HTML).

A :class:`Task` is plain data (picklable, JSON-able): workers load the workload from its spec
themselves (memoised per process), so nothing large crosses process boundaries.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import time
from collections.abc import Callable, Iterable, MutableMapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvharness.configs import to_json_dict
from kvharness.engine.scheduler import SchedulerConfig
from kvharness.report.io import parse_deadline, write_run_report
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig, Simulator
from kvharness.sim.summary import PolicyRow, policy_row
from kvharness.workload.model import Workload

__all__ = ["Task", "run_sweep", "run_task"]


@dataclass(frozen=True, slots=True)
class Task:
    """One simulation run, as data. ``out`` is its run directory (None: write nothing)."""

    workload: str
    cluster: str
    policy: str
    load: float = 1.0
    eviction: str = "lru"
    cpu_tier_blocks: int = 0
    block_size: int | None = None
    """Engine block size (tokens); None = the workload's."""
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    deadline: str = "1.5x"
    out: str | None = None
    policy_options: tuple[tuple[str, Any], ...] = ()
    """Keyword arguments of the policy, as (name, value) pairs."""

    def __post_init__(self) -> None:
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size must be >= 1 (or None), got {self.block_size}")
        SchedulerConfig(self.max_num_batched_tokens, self.max_num_seqs)


@functools.lru_cache(maxsize=4)
def _workload(spec: str) -> Workload:
    from kvharness.workload.load import load_workload

    return load_workload(spec)


_HASHES: dict[str, MutableMapping[int, tuple[int, ...]]] = {}


def run_task(task: Task, workload: Workload | None = None) -> PolicyRow:
    """Run one task; writes its run directory when ``task.out`` is set."""
    wl = workload if workload is not None else _workload(task.workload)
    block_size = wl.block_size if task.block_size is None else task.block_size
    cluster = parse_cluster(task.cluster, block_size=block_size)
    cfg = SimConfig(
        cluster,
        task.policy,
        scheduler=SchedulerConfig(task.max_num_batched_tokens, task.max_num_seqs),
        eviction=task.eviction,
        cpu_tier_blocks=task.cpu_tier_blocks,
        load=task.load,
        policy_options=dict(task.policy_options),
    )
    deadline = parse_deadline(task.deadline)
    hashes = _HASHES.setdefault(f"{task.workload}@{cluster.deployment.block_size}", {})
    t0 = time.perf_counter()
    result = Simulator(wl, cfg, hash_cache=hashes).run()
    wall = time.perf_counter() - t0
    from kvharness.report.metrics import summarise

    expected = {s.id: len(s.turns) for s in wl.sessions}
    label = f"{task.policy}"
    config = {**to_json_dict(task), "label": label, "cluster_resolved": cluster.label()}
    if task.out is not None:
        summary = write_run_report(
            task.out,
            result.records,
            {**config, "lower_bounds": result.lower_bounds},
            task.deadline,
            label=label,
            expected_turns=expected,
        )
    else:
        per_session = None
        if deadline.factor is not None:
            per_session = {k: deadline.of(v) for k, v in result.lower_bounds.items()}
        summary = summarise(
            result.records,
            deadline=deadline.seconds,
            label=label,
            expected_turns=expected,
            session_deadlines=per_session,
            deadline_rule=None if deadline.factor is None else f"{deadline.label()}",
        )
    return policy_row(
        task.policy,
        cluster.label(),
        task.load,
        summary,
        result.records,
        result.lower_bounds,
        deadline,
        preemptions=sum(r.preemptions for r in result.replicas),
        sim_seconds=result.end_time,
        wall_seconds=wall,
    )


def _ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


def run_sweep(
    tasks: Iterable[Task],
    *,
    executor: str = "auto",
    jobs: int | None = None,
    ray_address: str | None = None,
    on_row: Callable[[Task, PolicyRow], None] | None = None,
) -> list[PolicyRow]:
    """Run ``tasks``; rows come back in task order. ``executor``: ``auto`` (Ray if installed or
    ``ray_address`` is given, else processes), ``ray``, ``process`` or ``serial``."""
    todo = list(tasks)
    if executor == "auto":
        executor = "ray" if (ray_address or _ray_available()) else "process"
        if executor == "process" and (len(todo) <= 1 or (jobs or os.cpu_count() or 1) <= 1):
            executor = "serial"
    rows: list[PolicyRow | None] = [None] * len(todo)
    if executor == "serial":
        for i, t in enumerate(todo):
            rows[i] = run_task(t)
            if on_row:
                on_row(t, rows[i])  # type: ignore[arg-type]
    elif executor == "process":
        with ProcessPoolExecutor(max_workers=jobs or os.cpu_count()) as pool:
            futures = {pool.submit(run_task, t): i for i, t in enumerate(todo)}
            for fut in _as_completed(futures):
                i = futures[fut]
                rows[i] = fut.result()
                if on_row:
                    on_row(todo[i], rows[i])  # type: ignore[arg-type]
    elif executor == "ray":
        rows = _run_ray(todo, ray_address, on_row)  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown executor {executor!r}; choose auto, ray, process or serial")
    return [r for r in rows if r is not None]


def _as_completed(futures: dict[Any, int]) -> Iterable[Any]:
    from concurrent.futures import as_completed

    return as_completed(futures)


def _run_ray(
    todo: list[Task], address: str | None, on_row: Callable[[Task, PolicyRow], None] | None
) -> list[PolicyRow]:
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(run_task)
    refs = [remote.remote(t) for t in todo]
    out: list[PolicyRow] = []
    for t, ref in zip(todo, refs, strict=True):
        row: PolicyRow = ray.get(ref)
        if on_row:
            on_row(t, row)
        out.append(row)
    return out


def task_dir(root: Path, cluster: str, load: float, policy: str) -> str:
    """Where a task's run directory goes under a sweep's output root."""
    safe = cluster.replace(":", "_")
    return str(root / safe / f"load-{load:g}" / policy)
