"""Sandbox per-command overhead and grading time per task.

    .venv/bin/python benchmarks/env_sandbox.py [--suite DIR] [--runs N]

1. Per-command overhead: ``true`` run N times through :class:`Sandbox` (bwrap, limits, uid drop,
   repo chown) and N times as a plain subprocess; prints p50 / p90 of each and the p50 difference.
2. Grading time: every task of the suite graded twice (unchanged mutant, known fix) by the real
   :class:`Grader`; prints each task's times and p50 / mean / max over tasks. Without ``--suite``,
   the SMOKE_SUITE is built under .cache/ (as the tests do).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from kvharness.env.sandbox import Sandbox, python_env_paths
from kvharness.env.task import Task, load_suite
from kvharness.env.tasks import SMOKE_SUITE, build_suite, ensure_venv
from kvharness.env.tasks.verify import verify_task

REPO = Path(__file__).resolve().parents[1]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def overhead(runs: int, venv: Path, repo: Path) -> None:
    box = Sandbox(repo, ro_paths=python_env_paths(venv))
    plain: list[float] = []
    boxed: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(["true"], check=True)
        plain.append(time.perf_counter() - start)
        result = box.run(["true"])
        assert result.ok, result
        boxed.append(result.duration_s)
    print(f"per-command ({runs} runs of `true`, repo of {sum(1 for _ in repo.rglob('*'))} files):")
    print(
        f"  plain subprocess  p50 {_pct(plain, 0.5) * 1e3:7.1f} ms  p90 {_pct(plain, 0.9) * 1e3:7.1f} ms"
    )
    print(
        f"  bwrap sandbox     p50 {_pct(boxed, 0.5) * 1e3:7.1f} ms  p90 {_pct(boxed, 0.9) * 1e3:7.1f} ms"
    )
    print(f"  overhead p50      {(_pct(boxed, 0.5) - _pct(plain, 0.5)) * 1e3:7.1f} ms")


def grading(tasks: list[Task]) -> None:
    mutant_times: list[float] = []
    fixed_times: list[float] = []
    print(f"grading ({len(tasks)} tasks, mutant then fixed):")
    for task in tasks:
        check = verify_task(task)
        mutant, fixed = check.mutant, check.fixed
        mutant_times.append(mutant.duration_s)
        fixed_times.append(fixed.duration_s)
        print(
            f"  {task.id:20s} tests {len(task.tests):3d}  mutant {mutant.duration_s:5.2f} s "
            f"(score {mutant.score:.2f})  fixed {fixed.duration_s:5.2f} s (score {fixed.score:.2f})"
        )
    both = mutant_times + fixed_times
    print(
        f"  per grading: p50 {statistics.median(both):.2f} s  mean {statistics.mean(both):.2f} s  "
        f"max {max(both):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, help="a built suite (default: build the smoke suite)")
    parser.add_argument("--runs", type=int, default=50, help="runs of `true` for the overhead")
    args = parser.parse_args()
    venv = ensure_venv(REPO / ".cache" / "env-venv", SMOKE_SUITE.test_deps)
    if args.suite is None:
        args.suite = REPO / ".cache" / "env-bench" / "smoke"
        if not (args.suite / "suite.json").exists():
            build_suite(SMOKE_SUITE, args.suite, venv=venv, cache=REPO / ".cache" / "sdists")
    tasks = load_suite(args.suite)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (figures scale with load)")
    with tempfile.TemporaryDirectory() as tmp:
        repo = tasks[0].checkout(Path(tmp) / "repo")
        overhead(args.runs, venv, repo)
    grading(tasks)


if __name__ == "__main__":
    main()
