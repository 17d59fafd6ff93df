"""Command line of the suite builder, also used by ``kvharness env``.

``python -m kvharness.env.tasks build --out DIR`` builds a task suite from pinned sdists;
``python -m kvharness.env.tasks verify DIR`` checks every task of a built suite. Other CLIs reuse
:func:`add_build_arguments` + :func:`run_build` and :func:`add_verify_arguments` + :func:`run_verify`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from kvharness.env.chain.builder import build_chain_suite
from kvharness.env.chain.suite import CHAIN_SUITES
from kvharness.env.chain.task import ChainTask
from kvharness.env.task import Task, load_suite
from kvharness.env.tasks.builder import build_suite
from kvharness.env.tasks.suite import SUITES
from kvharness.env.tasks.verify import verify_task
from kvharness.errors import UserError


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``build`` (shared with ``kvharness env build-suite``)."""
    parser.add_argument("--out", type=Path, required=True, help="suite folder to write (created)")
    parser.add_argument(
        "--suite",
        choices=sorted([*SUITES, *CHAIN_SUITES]),
        default="default",
        help="which suite definition to build (default: %(default)s, 26 tasks from 4 packages; "
        "smoke: 3 of them; chain: 9 multi-milestone tasks, each 5-7 stubbed functions to "
        "restore in order, from the same packages; chain-smoke: 1 of them)",
    )
    parser.add_argument(
        "--venv",
        type=Path,
        default=Path(".cache/env-venv"),
        help="venv the tasks' tests run in, created if missing (default: %(default)s)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(".cache/sdists"),
        help="where downloaded sdists are kept (default: %(default)s)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_build(args: argparse.Namespace) -> int:
    """Build the suite the parsed ``args`` describe; print one summary line."""
    build = build_chain_suite if args.suite in CHAIN_SUITES else build_suite
    spec = CHAIN_SUITES[args.suite] if args.suite in CHAIN_SUITES else SUITES[args.suite]
    tasks: Sequence[Task] = build(
        spec,  # type: ignore[arg-type]
        args.out,
        venv=args.venv,
        cache=args.cache,
        progress=not args.no_progress,
    )
    packages = sorted({t.package for t in tasks})
    milestones = sum(len(t.milestones) for t in tasks if isinstance(t, ChainTask))
    what = f"{len(tasks)} tasks" + (f" ({milestones} milestones)" if milestones else "")
    print(f"{what} from {len(packages)} packages ({', '.join(packages)}) in {args.out}")
    return 0


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``verify``."""
    parser.add_argument("suite_dir", type=Path, help="a built suite folder")


def run_verify(args: argparse.Namespace) -> int:
    """Grade every task of a suite as mutant and as fixed; print one line per task."""
    tasks = [t for t in load_suite(args.suite_dir) if isinstance(t, Task)]
    if not tasks:
        raise UserError(
            f"{args.suite_dir} holds no coding tasks (a performance suite is checked by "
            "`kvharness env build-perf-suite --verify`)"
        )
    failed = 0
    for task in tasks:
        check = verify_task(task)
        failed += not check.ok
        status = "ok" if check.ok else "FAIL " + "; ".join(check.problems)
        print(
            f"{task.id}: {status} (F2P {len(task.fail_to_pass)}, P2P {len(task.pass_to_pass)}, "
            f"grading {check.mutant.duration_s:.2f} s / {check.fixed.duration_s:.2f} s)"
        )
    packages = len({t.package for t in tasks})
    print(f"{len(tasks) - failed}/{len(tasks)} tasks verified, {packages} packages")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvharness.env.tasks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build a task suite from pinned package versions")
    add_build_arguments(build)
    verify = sub.add_parser(
        "verify", help="check every task: the mutant fails FAIL_TO_PASS, the fix passes all"
    )
    add_verify_arguments(verify)
    args = parser.parse_args(argv)
    try:
        return run_build(args) if args.command == "build" else run_verify(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
