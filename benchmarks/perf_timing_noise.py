"""How a performance grading holds up on a machine that something else is using.

Builds one bundled task (``--task``, default softmax) and grades the unchanged reference (noop:
the true speedup is 1) and the task's correct-but-slower solution ``--repeats`` times each, while
``--load`` processes spin the CPU in bursts (on and off for exponential spells of mean
``--burst-s``; 0 spins without pause, as an idle vLLM-CPU engine does): the load a shared CI
machine puts on the timings. Prints, per solution, the
speedup estimates' mean, min, max and coefficient of variation, the intervals' mean relative
half-width, the largest lower end, the scores and how many gradings paid anything. A noop that
is paid is a false positive: the figure the grader's design (``env/perf/stats.py``) must keep
near zero.

    .venv/bin/python benchmarks/perf_timing_noise.py [--task softmax] [--repeats 10] [--load 1]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kvharness.env.perf.grading import PerfGrader
from kvharness.env.perf.suite import build_perf_suite
from kvharness.env.perf.task import SOLUTION
from kvharness.env.perf.verify import grade_solution


def _bursts(seed: int, burst_s: float) -> None:
    rng = random.Random(seed)
    while burst_s <= 0:  # steady: as an idle vLLM-CPU engine polls
        pass
    while True:
        until = time.perf_counter() + rng.expovariate(1 / burst_s)
        while time.perf_counter() < until:
            pass
        time.sleep(rng.expovariate(1 / burst_s))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="softmax", help="bundled task id")
    parser.add_argument("--repeats", type=int, default=10, help="gradings per solution")
    parser.add_argument("--load", type=int, default=1, help="bursty CPU-spinning processes")
    parser.add_argument(
        "--burst-s", type=float, default=0.5, help="mean spell, on or off (0: always on)"
    )
    args = parser.parse_args()
    loads = [
        mp.Process(target=_bursts, args=(i, args.burst_s), daemon=True) for i in range(args.load)
    ]
    for p in loads:
        p.start()
    try:
        with tempfile.TemporaryDirectory(prefix="kvh-perf-noise-") as tmp:
            tasks, _ = build_perf_suite(Path(tmp) / "suite", only=[args.task])
            if not tasks:
                print(f"no bundled task {args.task!r}", file=sys.stderr)
                return 2
            task = tasks[0]
            grader = PerfGrader(task, workdir=Path(tmp))
            print(
                f"{task.id}: {args.repeats} gradings each, {args.load} bursty load "
                f"process(es), mean spell {args.burst_s:g} s"
            )
            for label, folder in (("noop", task.repo_dir), ("slower", task.slower_dir)):
                runs, t0 = [], time.perf_counter()
                for _ in range(args.repeats):
                    runs.append(grade_solution(grader, folder / SOLUTION))
                timed = [r.speedup for r in runs if r.speedup is not None]
                est = [s.estimate for s in timed]
                scores = [r.score for r in runs]
                print(
                    f"{label:7} speedup mean {statistics.mean(est):.3f}x, min {min(est):.3f}x, "
                    f"max {max(est):.3f}x, CV {statistics.pstdev(est) / statistics.mean(est):.1%}"
                    f"; half-width mean {statistics.mean(s.noise for s in timed):.1%}; largest "
                    f"lower end {max(s.low for s in timed):.3f}x; scores {min(scores):.3f}-"
                    f"{max(scores):.3f}, {sum(x > 0 for x in scores)}/{len(scores)} paid; "
                    f"{(time.perf_counter() - t0) / len(runs):.1f} s per grading",
                    flush=True,
                )
    finally:
        for p in loads:
            p.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
