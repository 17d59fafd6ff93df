"""Sweeps: policies x loads x cluster sizes, run in parallel, each run written as a run directory
(records, config, summary, HTML).

**Jobs.** A :class:`SimJob` is one run as plain data (picklable, JSON-able): a workload spec, the
:class:`~kvharness.sim.simulator.SimConfig`, the goodput deadline and the run directory. Workers
load the workload from its spec themselves (memoised per process), so nothing large crosses
process boundaries.

**Executors.** Ray, a local process pool, or one by one. ``auto`` runs on Ray only when a
cluster address is given (``ray_address`` or the ``RAY_ADDRESS`` environment variable; ``local``
starts a private one-machine cluster), so having Ray installed never starts a cluster by itself;
without an address it uses the process pool, or serial for one job or one CPU. On Ray each job is
one task, and rows are handed to ``on_row`` as they finish (``ray.wait``), while the returned list
keeps the jobs' order.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterable, MutableMapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from kvharness.configs import to_json_dict
from kvharness.report.io import parse_deadline, summarise_with_deadline, write_run_report
from kvharness.sim.simulator import SimConfig, Simulator
from kvharness.sim.summary import PolicyRow, policy_row, vision_stats
from kvharness.workload.model import Workload

__all__ = ["SimJob", "job_dir", "run_job", "run_sweep"]


@dataclass(frozen=True, slots=True)
class SimJob:
    """One simulation run, as data."""

    workload: str
    """Workload spec (see :func:`kvharness.workload.load.load_workload`)."""
    config: SimConfig
    deadline: str = "1.5x"
    """Session deadline for goodput: seconds (``"600"``) or a factor of each session's lower
    bound (``"1.5x"``)."""
    out: str | None = None
    """Run directory (None: write nothing)."""
    workload_block_size: bool = True
    """Run the engines at the workload's block size (``config.cluster``'s is replaced by it once
    the workload is loaded); False: at ``config.cluster``'s, as given."""

    def resolve(self, workload: Workload) -> SimConfig:
        """The configuration the run uses on ``workload``."""
        if not self.workload_block_size:
            return self.config
        cluster = self.config.cluster.with_block_size(workload.block_size)
        return dataclasses.replace(self.config, cluster=cluster)


@functools.lru_cache(maxsize=4)
def _workload(spec: str) -> Workload:
    from kvharness.workload.load import load_workload

    return load_workload(spec)


_HASHES: dict[str, MutableMapping[int, tuple[int, ...]]] = {}


def run_job(job: SimJob, workload: Workload | None = None) -> PolicyRow:
    """Run one job (on ``workload`` when given, else on its spec's); writes its run directory
    when ``job.out`` is set."""
    wl = workload if workload is not None else _workload(job.workload)
    cfg = job.resolve(wl)
    cluster = cfg.cluster
    deadline = parse_deadline(job.deadline)
    hashes = _HASHES.setdefault(f"{job.workload}@{cluster.deployment.block_size}", {})
    t0 = time.perf_counter()
    result = Simulator(wl, cfg, hash_cache=hashes).run()
    wall = time.perf_counter() - t0
    expected = {s.id: len(s.turns) for s in wl.sessions}
    label = cfg.policy
    if job.out is None:
        summary = summarise_with_deadline(
            result.records, deadline, result.lower_bounds, label=label, expected_turns=expected
        )
    else:
        config = {
            "workload": job.workload,
            **to_json_dict(cfg),
            "label": label,
            "cluster_resolved": cluster.label(),
            "lower_bounds": result.lower_bounds,
        }
        summary = write_run_report(
            job.out, result.records, config, job.deadline, label=label, expected_turns=expected
        )
    return policy_row(
        cfg.policy,
        cluster.label(),
        cfg.load,
        summary,
        result.records,
        result.lower_bounds,
        preemptions=sum(r.preemptions for r in result.replicas),
        sim_seconds=result.end_time,
        wall_seconds=wall,
        decode_step_p50=result.decode_step_p50,
        shared_prefix_share=(
            result.shared_prefix_share if cfg.attention == "cascade" or cfg.shared_stats else None
        ),
        attention=cfg.attention,
        vision=vision_stats(result),
    )


def run_sweep(
    runs: Iterable[SimJob],
    *,
    executor: str = "auto",
    jobs: int | None = None,
    ray_address: str | None = None,
    on_row: Callable[[SimJob, PolicyRow], None] | None = None,
) -> list[PolicyRow]:
    """Run ``runs``; rows come back in their order, and ``on_row`` sees each as it finishes.
    ``executor``: ``auto`` (Ray when ``ray_address`` or ``RAY_ADDRESS`` names a cluster, else
    ``jobs`` processes, or serial), ``ray`` (``ray_address``, else ``RAY_ADDRESS``, else a new
    local cluster; a Ray session already open in this process is used as it is), ``process`` or
    ``serial``."""
    todo = list(runs)
    if executor == "auto":
        executor = "ray" if (ray_address or os.environ.get("RAY_ADDRESS")) else "process"
        if executor == "process" and (len(todo) <= 1 or (jobs or os.cpu_count() or 1) <= 1):
            executor = "serial"
    rows: list[PolicyRow | None] = [None] * len(todo)
    if executor == "serial":
        for i, t in enumerate(todo):
            rows[i] = run_job(t)
            if on_row:
                on_row(t, rows[i])  # type: ignore[arg-type]
    elif executor == "process":
        with ProcessPoolExecutor(max_workers=jobs or os.cpu_count()) as pool:
            futures = {pool.submit(run_job, t): i for i, t in enumerate(todo)}
            for fut in as_completed(futures):
                i = futures[fut]
                rows[i] = fut.result()
                if on_row:
                    on_row(todo[i], rows[i])  # type: ignore[arg-type]
    elif executor == "ray":
        rows = _run_ray(todo, ray_address, on_row)  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown executor {executor!r}; choose auto, ray, process or serial")
    return [r for r in rows if r is not None]


def _run_ray(
    todo: list[SimJob], address: str | None, on_row: Callable[[SimJob, PolicyRow], None] | None
) -> list[PolicyRow]:
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(run_job)
    refs = [remote.remote(t) for t in todo]
    index = {ref: i for i, ref in enumerate(refs)}
    rows: list[PolicyRow | None] = [None] * len(todo)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            i = index[ref]
            rows[i] = ray.get(ref)
            if on_row:
                on_row(todo[i], rows[i])  # type: ignore[arg-type]
    return [r for r in rows if r is not None]


def job_dir(root: Path, cluster: str, load: float, policy: str) -> str:
    """Where a job's run directory goes under a sweep's output root."""
    safe = cluster.replace(":", "_")
    return str(root / safe / f"load-{load:g}" / policy)
