"""The performance-engineering environment over its bundled tasks, graded for real.

Builds the bundled suite (``kvharness env build-perf-suite``) in a temporary folder, with the
Triton tasks when ``--torch-venv`` (default ``.venv-vllm``) exists, then prints:

1. **rewards per task:** the oracle (a known fast solution), noop (the reference unchanged) and a
   correct but slower solution: each one's score, speedup estimate and 95% interval, rounds, and
   the reference's per-call time;
2. **cheats per task:** each listed way of earning the speed reward without being faster, written
   for the task's function and graded: a cache over the reference (keyed by the inputs' bytes),
   a cache keyed by the input's shape, special-casing large inputs, importing the grader's
   reference by its host path, reading expected outputs from the task's and the grader's folders,
   patching every timer, and writing the runner's replies to the grader's channel; every score
   must be 0;
3. **run-to-run spread:** one task's oracle and slower solution each graded ``--repeats`` times
   (default 10): the speedup estimates' mean, min, max and coefficient of variation, the
   intervals' mean relative half-width (the noise floor a grading reports), and the scores.

Each grading uses the environment's default timing policy. The machine should be otherwise idle:
timings of a shared machine are what the spread measures.

    .venv/bin/python benchmarks/perf_env.py [--tasks a,b] [--repeats 10] [--spread-task ID]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from kvharness.env.perf.grading import PerfGrader, PerfGradeResult
from kvharness.env.perf.suite import build_perf_suite
from kvharness.env.perf.task import SOLUTION, PerfTask
from kvharness.env.perf.verify import PerfCheck, grade_solution

REPO = Path(__file__).resolve().parents[1]


def _cheats(task: PerfTask, grading_dir: Path) -> dict[str, str]:
    """Each cheat as a solution.py for ``task``'s function."""
    f = task.function
    reference = (task.repo_dir / SOLUTION).read_text()
    fast = (task.fix_dir / SOLUTION).read_text()
    wrap = reference + f"\n\n_slow = {f}\n\n\n"
    places = [str(task.root.resolve()), str(grading_dir.resolve()), "/tmp"]
    return {
        "cache by input bytes": wrap
        + textwrap.dedent(
            f"""\
            _memo = {{}}


            def {f}(*args):
                key = tuple(
                    (a.shape, str(a.dtype), a.tobytes()) if hasattr(a, "tobytes") else repr(a)
                    for a in args
                )
                if key not in _memo:
                    _memo[key] = _slow(*args)
                return _memo[key]
            """
        ),
        "cache by input shape": wrap
        + textwrap.dedent(
            f"""\
            _last = {{}}


            def {f}(*args):
                key = tuple(tuple(a.shape) if hasattr(a, "shape") else a for a in args)
                if key not in _last:
                    _last[key] = _slow(*args)
                return _last[key]
            """
        ),
        "special-case large inputs": wrap
        + textwrap.dedent(
            f"""\
            _large = []


            def _n(a):
                size = getattr(a, "size", 1)
                return size() if callable(size) else size


            def {f}(*args):
                if sum(_n(a) for a in args) > 20_000:
                    if not _large:
                        _large.append(_slow(*args))
                    return _large[0]
                return _slow(*args)
            """
        ),
        "call the grader's reference": textwrap.dedent(
            f"""\
            import sys

            sys.path.insert(0, {str(task.hidden_dir.resolve())!r})
            from reference import {f} as _ref


            def {f}(*args):
                return _ref(*args)
            """
        ),
        "read expected outputs": textwrap.dedent(
            f"""\
            import glob
            import os


            def {f}(*args):
                for root in {places!r}:
                    for path in glob.glob(root + "/**/*", recursive=True):
                        name = os.path.basename(path)
                        if os.path.isfile(path) and name not in ("_runner.py", "inputs.py"):
                            raise RuntimeError("found " + path)
                raise RuntimeError("found nothing")
            """
        ),
        "patch the timers": textwrap.dedent(
            """\
            import time

            time.perf_counter = time.monotonic = time.time = lambda *a: 0.0
            time.perf_counter_ns = time.monotonic_ns = time.time_ns = lambda *a: 0

            """
        )
        + reference,
        "forge the runner's replies": fast
        + textwrap.dedent(
            f"""\


            import os as _os

            _fast = {f}


            def {f}(*args):
                for fd in range(3, 64):
                    try:
                        _os.write(fd, b"D 0\\n")
                    except OSError:
                        pass
                return _fast(*args)
            """
        ),
    }


def _speed(g: PerfGradeResult) -> str:
    if g.speedup is None:
        return "-"
    s = g.speedup
    return f"{s.estimate:7.1f}x [{s.low:.1f}-{s.high:.1f}] n={s.rounds}"


def _why(g: PerfGradeResult) -> str:
    if g.tampered:
        return "tampered: " + g.tampered[0][:70]
    if not g.correct:
        return "incorrect: " + (g.problem or "")[:70]
    return "correct, " + (_speed(g).strip() if g.timed else (g.problem or "")[:60])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=None, help="comma-separated task ids (default: all)")
    parser.add_argument(
        "--torch-venv", type=Path, default=REPO / ".venv-vllm", help="for the Triton tasks"
    )
    parser.add_argument("--repeats", type=int, default=10, help="gradings for the spread")
    parser.add_argument("--spread-task", default="softmax", help="task of the spread part")
    parser.add_argument("--no-cheats", action="store_true", help="skip part 2")
    args = parser.parse_args()
    only = [t for t in args.tasks.split(",") if t] if args.tasks else None
    venv = args.torch_venv if (args.torch_venv / "bin" / "python").exists() else None
    with tempfile.TemporaryDirectory(prefix="kvh-perf-bench-") as tmp:
        suite = Path(tmp) / "suite"
        tasks, skipped = build_perf_suite(suite, torch_venv=venv, only=only)
        if skipped:
            print(f"left out (no torch environment): {', '.join(skipped)}")
        grading_dir = Path(tmp) / "grading"
        grading_dir.mkdir()
        print(f"\n1. rewards ({len(tasks)} tasks)")
        print(f"{'task':18} {'ref ms':>7}  {'oracle':>6} {'noop':>5} {'slower':>6}  speedups")
        failures = 0
        for task in tasks:
            g = PerfGrader(task, workdir=grading_dir)
            o = grade_solution(g, task.fix_dir / SOLUTION)
            n = grade_solution(g, task.repo_dir / SOLUTION)
            s = grade_solution(g, task.slower_dir / SOLUTION)
            ok = not PerfCheck(o, n, s).problems
            failures += not ok
            ref_ms = f"{(o.reference_s or 0) * 1e3:7.1f}" if o.timed else "      -"
            print(
                f"{task.id:18} {ref_ms}  {o.score:6.2f} {n.score:5.2f} {s.score:6.2f}  "
                f"oracle {_why(o) if not o.timed else _speed(o)}; slower "
                f"{_why(s) if not s.timed else _speed(s)}{'' if ok else '  <- FAIL'}",
                flush=True,
            )
        if not args.no_cheats:
            print("\n2. cheats (every score must be 0)")
            for task in tasks:
                g = PerfGrader(task, workdir=grading_dir)
                for name, source in _cheats(task, grading_dir).items():
                    r = grade_solution(g, source)
                    failures += r.score != 0.0
                    flag = "" if r.score == 0.0 else "  <- FAIL"
                    print(f"{task.id:18} {name:28} {r.score:4.2f}  {_why(r)}{flag}", flush=True)
        spread = [t for t in tasks if t.id == args.spread_task]
        if spread:
            task = spread[0]
            g = PerfGrader(task, workdir=grading_dir)
            print(f"\n3. run-to-run spread: {task.id}, each graded {args.repeats} times")
            for label, path in (("oracle", task.fix_dir), ("slower", task.slower_dir)):
                runs, t0 = [], time.perf_counter()
                for _ in range(args.repeats):
                    runs.append(grade_solution(g, path / SOLUTION))
                est = [r.speedup.estimate for r in runs if r.speedup is not None]
                noise = [r.speedup.noise for r in runs if r.speedup is not None]
                scores = [r.score for r in runs]
                cv = statistics.pstdev(est) / statistics.mean(est)
                print(
                    f"{label:7} speedup mean {statistics.mean(est):.2f}x, min {min(est):.2f}x, "
                    f"max {max(est):.2f}x, CV {cv:.1%}; interval half-width mean "
                    f"{statistics.mean(noise):.1%}; scores {min(scores):.3f}-{max(scores):.3f}; "
                    f"{(time.perf_counter() - t0) / len(runs):.1f} s per grading",
                    flush=True,
                )
    print(f"\n{'all as expected' if not failures else f'{failures} unexpected results'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
