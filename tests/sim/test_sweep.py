"""Sweeps: the process pool and a real local Ray cluster run jobs like serial does."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kvharness.report.io import parse_deadline
from kvharness.report.metrics import Summary
from kvharness.sim import sweep as sweep_module
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig
from kvharness.sim.summary import render_rows
from kvharness.sim.sweep import SimJob, run_job, run_sweep

SMALL = "synthetic:sessions=3,steps_median=4,repo_tokens_median=3000"
CLUSTER = parse_cluster("2xH200:llama-3.1-8b")
TASKS = [SimJob(SMALL, SimConfig(CLUSTER, p)) for p in ("round_robin", "session")]


def _key(rows: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.policy, r.turns, r.goodput, r.ttft_p50, r.hit_ratio) for r in rows]


def test_process_pool_matches_serial() -> None:
    serial = run_sweep(TASKS, executor="serial")
    pooled = run_sweep(TASKS, executor="process", jobs=2)
    assert _key(serial) == _key(pooled)
    assert [r.policy for r in serial] == ["round_robin", "session"]


def test_ray_runs_the_jobs_like_serial_does(ray_cluster: str) -> None:
    """A real local Ray cluster: rows as the serial executor's, in the jobs' order, each handed
    to ``on_row`` once as it finished; the jobs ran in Ray's worker processes (the driver's
    per-process hash cache stayed empty)."""
    serial = run_sweep(TASKS, executor="serial")
    sweep_module._HASHES.clear()
    seen: list[str] = []
    rows = run_sweep(
        TASKS,
        executor="auto",
        ray_address=ray_cluster,
        on_row=lambda job, r: seen.append(job.config.policy),
    )
    assert _key(rows) == _key(serial)
    assert [r.policy for r in rows] == ["round_robin", "session"]
    assert sorted(seen) == ["round_robin", "session"]
    assert sweep_module._HASHES == {}


def test_auto_without_an_address_does_not_use_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray being installed starts no cluster: ``auto`` needs an address (argument or
    RAY_ADDRESS) to pick it."""

    asked: list[str | None] = []

    def on_ray(todo: list[SimJob], address: str | None, on_row: Any) -> list[Any]:
        asked.append(address)
        return [run_job(t) for t in todo]

    monkeypatch.setattr(sweep_module, "_run_ray", on_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert _key(run_sweep(TASKS)) == _key(run_sweep(TASKS, executor="serial"))
    assert asked == []
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    run_sweep(TASKS)
    assert asked == [None]


def test_policy_options_reach_the_policy() -> None:
    base = SimJob(SMALL, SimConfig(CLUSTER, "agent_aware"))

    def with_options(**options: Any) -> SimJob:
        return replace(base, config=replace(base.config, policy_options=options))

    with pytest.raises(TypeError, match="no_such_option"):
        run_sweep([with_options(no_such_option=1)], executor="serial")
    # A context cost this large spreads the sessions: a different run from the default one.
    spread = with_options(context_cost=10.0)
    assert _key(run_sweep([spread], executor="serial")) != _key(
        run_sweep([base], executor="serial")
    )


def test_a_run_written_or_not_is_summarised_the_same(tmp_path: Path) -> None:
    job = SimJob(SMALL, SimConfig(CLUSTER, "round_robin"), deadline="1.2x")
    quiet = run_job(job)
    written = run_job(replace(job, out=str(tmp_path / "run")))
    assert msgspec.structs.replace(quiet, wall_seconds=0.0) == msgspec.structs.replace(
        written, wall_seconds=0.0
    )
    summary = Summary.from_json((tmp_path / "run" / "summary.json").read_bytes())
    assert summary.deadline_rule == "1.2x lower bound"
    assert "within 1.2x lower bound" in str(
        render_rows([quiet], parse_deadline("1.2x"), "").caption
    )
