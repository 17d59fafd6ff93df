"""Grading time of the honest path: each task's oracle repository graded again and again.

    .venv/bin/python benchmarks/grading_time.py [--suite DIR] [--runs N]

For every task of the suite (default: the SMOKE_SUITE, built under .cache/ as the tests build
it), the known fix is applied to a copy of the task's repository, and that copy is graded
``--runs`` times by :meth:`Grader.grade` (sync path: ``CodingEnv``) and ``--runs`` times by
:meth:`Grader.agrade` (async path: ``AsyncCodingEnv``, ``kvharness env run``), one grading at a
time, the two paths interleaved so that a change of machine load hits both alike. A grading's time
is the wall time of the call: staging the copy, the sandboxed pytest run, reading the report.

Prints p50 / p90 per path and overall (seconds, nearest rank), p50 per task and path, and checks
every grading of the fix scored 1.0 untampered (a faster grader that fails the oracle is no
gain). Figures scale with the machine's load, printed first: compare two graders by running the
script for each back to back (e.g. ``PYTHONPATH=OTHER/src`` for the other source tree).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import kvharness
from kvharness.env.grading import Grader, GradeResult
from kvharness.env.task import Task, load_suite
from kvharness.env.tasks import SMOKE_SUITE, build_suite, ensure_venv

REPO = Path(__file__).resolve().parents[1]
PATHS = ("sync", "async")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _grade_once(
    grader: Grader, repo: Path, path: str, runner: asyncio.Runner
) -> tuple[float, GradeResult]:
    """One grading on ``path`` and its wall time in seconds."""
    start = time.perf_counter()
    result = grader.grade(repo) if path == "sync" else runner.run(grader.agrade(repo))
    return time.perf_counter() - start, result


def _smoke_suite() -> Path:
    venv = ensure_venv(REPO / ".cache" / "env-venv", SMOKE_SUITE.test_deps)
    suite = REPO / ".cache" / "env-bench" / "smoke"
    if not (suite / "suite.json").exists():
        build_suite(SMOKE_SUITE, suite, venv=venv, cache=REPO / ".cache" / "sdists")
    return suite


def measure(
    tasks: list[Task], runs: int, work: Path
) -> tuple[dict[tuple[str, str], list[float]], list[str]]:
    """Seconds per grading, keyed by (task id, path), and the gradings that did not pay the
    fix 1.0 untampered."""
    graders: list[tuple[Task, Grader, Path]] = []
    for task in tasks:
        repo = task.checkout(work / task.id)
        task.apply_fix(repo)
        graders.append((task, Grader(task), repo))
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    wrong: list[str] = []
    with asyncio.Runner() as runner:
        for _ in range(runs):
            for task, grader, repo in graders:
                for path in PATHS:
                    seconds, result = _grade_once(grader, repo, path, runner)
                    times[task.id, path].append(seconds)
                    if result.score != 1.0 or result.tampered:
                        wrong.append(f"{task.id} {path}: {result.score} {result.summary()}")
    return times, wrong


def report(times: dict[tuple[str, str], list[float]], task_ids: list[str]) -> None:
    print(f"{'task':<20} " + " ".join(f"{p + ' p50 s':>12}" for p in PATHS))
    for tid in task_ids:
        print(f"{tid:<20} " + " ".join(f"{_pct(times[tid, p], 0.5):12.2f}" for p in PATHS))
    rows = [(p, [s for (_, q), v in times.items() if q == p for s in v]) for p in PATHS]
    rows.append(("overall", [s for v in times.values() for s in v]))
    for name, values in rows:
        print(
            f"{name:<8} p50 {_pct(values, 0.5):6.2f} s  p90 {_pct(values, 0.9):6.2f} s  "
            f"({len(values)} gradings)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", type=Path, help="a built suite (default: the smoke suite)")
    parser.add_argument("--runs", type=int, default=10, help="gradings per task and path (10)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    tasks = load_suite(args.suite if args.suite is not None else _smoke_suite())
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (figures scale with load)")
    print(f"grader: {Path(kvharness.__file__).parent}; {len(tasks)} tasks x {args.runs} runs")
    with tempfile.TemporaryDirectory(prefix="kvh-grading-time-") as tmp:
        times, wrong = measure(tasks, args.runs, Path(tmp))
    report(times, [t.id for t in tasks])
    if wrong:
        print("the oracle was not paid 1.0 untampered:\n  " + "\n  ".join(wrong), file=sys.stderr)
        return 1
    print(f"the oracle was paid 1.0 untampered in all {sum(map(len, times.values()))} gradings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
