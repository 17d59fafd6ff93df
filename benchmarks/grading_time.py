"""Grading time of the honest path: each task's oracle repository graded again and again.

    .venv/bin/python benchmarks/grading_time.py [--suite DIR] [--runs N] [--compare SRC]

For every task of the suite (default: the SMOKE_SUITE, built under .cache/ as the tests build
it), the known fix is applied to a copy of the task's repository, and that copy is graded
``--runs`` times by :meth:`Grader.grade` (sync path: ``CodingEnv``) and ``--runs`` times by
:meth:`Grader.agrade` (async path: ``AsyncCodingEnv``, ``kvharness env run``), one grading at a
time. A grading's time is the wall time of the call: staging the copy, the sandboxed pytest run,
reading the report.

``--compare SRC`` grades with a second kvharness as well, the one whose package is in the folder
SRC (``SRC/kvharness``, e.g. another checkout's ``src``), in a worker process, each grading of
this kvharness followed or preceded (alternately) by the same grading of the other: on a shared
machine the load changes from minute to minute, and only interleaved gradings see the same load.

Prints, per grader, p50 / p90 per path and overall (seconds, nearest rank) and the p50 per task
and path; with ``--compare``, the ratio of the overall p50s. Checks that every grading of the fix
scored 1.0 untampered (a faster grader that fails the oracle is no gain): exit status 1 if not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import kvharness
from kvharness.env.grading import Grader
from kvharness.env.task import Task, load_suite
from kvharness.env.tasks import SMOKE_SUITE, build_suite, ensure_venv

REPO = Path(__file__).resolve().parents[1]
PATHS = ("sync", "async")


class Sample(NamedTuple):
    """One grading: its wall time (s), and what was wrong with its result ("" when the fix was
    paid 1.0 untampered)."""

    wall_s: float
    wrong: str


class Grading(Protocol):
    name: str

    def grade(self, task_id: str, path: str) -> Sample: ...

    def close(self) -> None: ...


class LocalGrading:
    """Grades with the kvharness this process imported, one oracle copy per task."""

    def __init__(self, tasks: list[Task], work: Path) -> None:
        self.name = str(Path(kvharness.__file__).parent)
        self._graders: dict[str, tuple[Grader, Path]] = {}
        for task in tasks:
            repo = task.checkout(work / task.id)
            task.apply_fix(repo)
            self._graders[task.id] = (Grader(task), repo)
        self._runner = asyncio.Runner()

    def grade(self, task_id: str, path: str) -> Sample:
        grader, repo = self._graders[task_id]
        start = time.perf_counter()
        run = self._runner.run
        result = grader.grade(repo) if path == "sync" else run(grader.agrade(repo))
        wall = time.perf_counter() - start
        ok = result.score == 1.0 and not result.tampered
        return Sample(wall, "" if ok else f"score {result.score}: {result.summary()}")

    def close(self) -> None:
        self._runner.close()


class WorkerGrading:
    """Grades with the kvharness in ``src``: this script run with ``--worker`` in a child
    process, one JSON line per grading over its stdin and stdout."""

    def __init__(self, src: Path, suite: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(src)}
        argv = [sys.executable, __file__, "--worker", "--suite", str(suite)]
        self._proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.name = self._ask({"name": True})["name"]

    def _ask(self, request: dict[str, object]) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker grading with {request} exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def grade(self, task_id: str, path: str) -> Sample:
        answer = self._ask({"task": task_id, "path": path})
        return Sample(float(answer["wall_s"]), str(answer["wrong"]))

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait()


def serve(tasks: list[Task]) -> None:
    """The worker's loop: a request per stdin line, an answer per stdout line."""
    with tempfile.TemporaryDirectory(prefix="kvh-grading-time-") as tmp:
        local = LocalGrading(tasks, Path(tmp))
        for line in sys.stdin:
            request = json.loads(line)
            if "name" in request:
                answer: dict[str, object] = {"name": local.name}
            else:
                answer = local.grade(request["task"], request["path"])._asdict()
            print(json.dumps(answer), flush=True)
        local.close()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _smoke_suite() -> Path:
    venv = ensure_venv(REPO / ".cache" / "env-venv", SMOKE_SUITE.test_deps)
    suite = REPO / ".cache" / "env-bench" / "smoke"
    if not (suite / "suite.json").exists():
        build_suite(SMOKE_SUITE, suite, venv=venv, cache=REPO / ".cache" / "sdists")
    return suite


Samples = dict[tuple[str, str], list[Sample]]


def measure(gradings: list[Grading], task_ids: list[str], runs: int) -> list[Samples]:
    """Every grading's samples, keyed by (task id, path), per grader. The graders take turns
    on each (task, path), in an order that is reversed every run."""
    out: list[Samples] = [defaultdict(list) for _ in gradings]
    for run in range(runs):
        order = list(enumerate(gradings))
        if run % 2:
            order.reverse()
        for task_id in task_ids:
            for path in PATHS:
                for i, grading in order:
                    out[i][task_id, path].append(grading.grade(task_id, path))
    return out


def report(name: str, samples: Samples, task_ids: list[str]) -> float:
    """Print one grader's figures; returns its overall p50 (s)."""
    print(f"grader {name}")
    print(f"  {'task':<20} " + " ".join(f"{p + ' p50 s':>12}" for p in PATHS))
    for tid in task_ids:
        p50s = [_pct([s.wall_s for s in samples[tid, p]], 0.5) for p in PATHS]
        print(f"  {tid:<20} " + " ".join(f"{v:12.2f}" for v in p50s))
    rows = [(p, [s.wall_s for (_, q), v in samples.items() if q == p for s in v]) for p in PATHS]
    rows.append(("overall", [s.wall_s for v in samples.values() for s in v]))
    for label, values in rows:
        print(
            f"  {label:<8} p50 {_pct(values, 0.5):6.2f} s  p90 {_pct(values, 0.9):6.2f} s  "
            f"({len(values)} gradings)"
        )
    return _pct(rows[-1][1], 0.5)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", type=Path, help="a built suite (default: the smoke suite)")
    parser.add_argument("--runs", type=int, default=10, help="gradings per task and path (10)")
    parser.add_argument(
        "--compare", type=Path, metavar="SRC", help="also grade with the kvharness in SRC"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    if args.compare is not None and not (args.compare / "kvharness" / "__init__.py").exists():
        parser.error(f"--compare: no kvharness package in {args.compare}")
    suite = args.suite if args.suite is not None else _smoke_suite()
    tasks = load_suite(suite)
    if args.worker:
        serve(tasks)
        return 0
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (figures scale with load)")
    print(f"{len(tasks)} tasks x {args.runs} runs x {len(PATHS)} paths per grader")
    task_ids = [t.id for t in tasks]
    with tempfile.TemporaryDirectory(prefix="kvh-grading-time-") as tmp:
        gradings: list[Grading] = [LocalGrading(tasks, Path(tmp))]
        if args.compare is not None:
            gradings.append(WorkerGrading(args.compare.resolve(), suite))
        try:
            results = measure(gradings, task_ids, args.runs)
        finally:
            for grading in gradings:
                grading.close()
    p50s = [report(g.name, s, task_ids) for g, s in zip(gradings, results, strict=True)]
    if len(p50s) == 2:
        print(
            f"overall p50 ratio, {gradings[0].name} / {gradings[1].name}: {p50s[0] / p50s[1]:.2f}"
        )
    wrong = [
        f"{g.name} {tid} {path}: {s.wrong}"
        for g, samples in zip(gradings, results, strict=True)
        for (tid, path), values in samples.items()
        for s in values
        if s.wrong
    ]
    if wrong:
        print("the oracle was not paid 1.0 untampered:\n  " + "\n  ".join(wrong), file=sys.stderr)
        return 1
    total = sum(len(v) for samples in results for v in samples.values())
    print(f"the oracle was paid 1.0 untampered in all {total} gradings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
