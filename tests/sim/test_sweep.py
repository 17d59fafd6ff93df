"""Sweeps: the process pool runs jobs like serial does; the Ray path against a stand-in module."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kvharness.report.io import parse_deadline
from kvharness.report.metrics import Summary
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


def test_ray_path_with_a_stand_in_ray_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """MOCK: Ray is not installed here; a stand-in module runs remote calls in-process, so this
    checks only how the sweep drives Ray's API (init with the address, remote, get)."""
    calls: dict[str, Any] = {}
    fake = types.ModuleType("ray")

    def init(address: str | None = None, **kw: Any) -> None:
        calls["address"] = address

    class _Ref:
        def __init__(self, value: Any) -> None:
            self.value = value

    def remote(fn: Callable[..., Any]) -> Any:
        return types.SimpleNamespace(remote=lambda *a: _Ref(fn(*a)))

    fake.init = init  # type: ignore[attr-defined]
    fake.is_initialized = lambda: False  # type: ignore[attr-defined]
    fake.remote = remote  # type: ignore[attr-defined]
    fake.get = lambda ref: ref.value  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray", fake)
    seen: list[str] = []
    rows = run_sweep(
        TASKS,
        executor="auto",
        ray_address="ray://head:10001",
        on_row=lambda job, r: seen.append(job.config.policy),
    )
    assert calls["address"] == "ray://head:10001"
    assert _key(rows) == _key(run_sweep(TASKS, executor="serial"))
    assert seen == ["round_robin", "session"]


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
