"""`kvharness report`: read run directories (sim or bench), show one, compare several."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from rich.console import Console

from kvharness.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kvharness.report.html import Run
    from kvharness.report.io import DeadlineSpec, RunData
    from kvharness.report.metrics import Summary
    from kvharness.report.records import TurnRecord

HELP = "show a run's report, or compare runs side by side (sim or bench run directories)"

_RUN_DIR_HELP = (
    "run directory written by `kvharness sim` or `kvharness bench` "
    "(records.jsonl, config.json, summary.json, report.html), or for compare a folder of "
    "`kvharness env run` (its harness.json: the harness benchmark's figures); or an NVIDIA "
    "AIPerf artifacts directory, or its profile_export_aiperf.json or profile_export.jsonl"
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("report", help=HELP, description=HELP)
    sub = parser.add_subparsers(dest="report_command", metavar="ACTION")
    parser.set_defaults(func=lambda _args: _no_action(parser))

    show = sub.add_parser(
        "show",
        help="one run: latency, goodput, time breakdown, cache hits, errors",
        description="Print the report of one run, recomputed from its records.jsonl.",
    )
    show.add_argument("run_dir", metavar="RUN_DIR", help=_RUN_DIR_HELP)
    show.add_argument("--json", action="store_true", help="print the summary as JSON instead")
    show.add_argument("--html", metavar="OUT", help="also write the HTML report to OUT")
    show.add_argument(
        "--csv",
        metavar="OUT",
        help="also write the records to OUT, one row per attempt (with TTFT, end-to-end and "
        "ITL in seconds), and the run's figures to OUT's name with -summary before the suffix",
    )
    _deadline(show)
    show.set_defaults(func=run_show)

    cmp = sub.add_parser(
        "compare",
        help="runs side by side with changes against the first (better/worse marked)",
        description=(
            "Lay runs side by side (bench or sim, same schema): goodput, TTFT p50/p99, makespan, "
            "cached vs ideal tokens, errors, with each change against the baseline run marked "
            "better, worse or same."
        ),
    )
    cmp.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help=_RUN_DIR_HELP)
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON instead")
    cmp.add_argument("--html", metavar="OUT", help="also write an HTML report overlaying the runs")
    cmp.add_argument(
        "--csv", metavar="OUT", help="also write the runs' figures to OUT, one row per run"
    )
    cmp.add_argument(
        "--baseline",
        type=int,
        default=0,
        metavar="N",
        help="index of the run the others are compared against (default 0: the first given)",
    )
    cmp.add_argument(
        "--tolerance",
        type=float,
        default=0.01,
        metavar="FRAC",
        help="relative change counted as 'same' (default 0.01 = 1%%)",
    )
    cmp.add_argument(
        "--rows",
        action="store_true",
        help="one row per run instead of one column per run (suits many runs, e.g. policies)",
    )
    _deadline(cmp)
    cmp.set_defaults(func=run_compare)


def _deadline(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--deadline",
        metavar="D",
        help=(
            "session deadline for goodput: seconds (600) or a factor of each session's lower "
            "bound (1.5x; sim runs record the bounds); default: the one each run was recorded with"
        ),
    )


def _no_action(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _console() -> Console:
    # Wide enough for a comparison of several runs when the output is not a terminal.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(width=width, highlight=False)


def _deadline_arg(args: argparse.Namespace) -> DeadlineSpec | None:
    from kvharness.report.io import parse_deadline

    try:
        value: object = args.deadline
        return parse_deadline(value)
    except UserError as err:
        raise UserError(f"--deadline: {err}") from None


def run_show(args: argparse.Namespace) -> int:
    from kvharness.report.aiperf import load_any
    from kvharness.report.table import render_summary

    deadline = _deadline_arg(args)
    run = load_any(args.run_dir)
    summary = run.summarise(deadline)
    if args.json:
        sys.stdout.write(summary.to_json().decode() + "\n")
    else:
        _console().print(render_summary(summary))
        _print_own_figures([run], [summary])
    if args.html:
        _write_html(args.html, [(summary, run.records)])
    if args.csv:
        _write_csv(args.csv, [summary], run.records)
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from kvharness.report.aiperf import load_any
    from kvharness.report.compare import compare
    from kvharness.report.table import render_comparison

    if all((Path(d) / "harness.json").is_file() for d in args.run_dirs):
        return _compare_harness(args)
    deadline = _deadline_arg(args)
    if not 0 <= args.baseline < len(args.run_dirs):
        raise UserError(f"--baseline {args.baseline}: give 0..{len(args.run_dirs) - 1}")
    if not 0 <= args.tolerance < 1:
        raise UserError(f"--tolerance must be in [0, 1), got {args.tolerance:g}")
    runs = [load_any(d) for d in args.run_dirs]
    if deadline is None:
        deadlines = {r.deadline for r in runs}
        if len(deadlines) > 1:
            listed = ", ".join(f"{r.label}: {r.deadline}" for r in runs)
            raise UserError(f"runs have different deadlines ({listed}); pass --deadline")
        deadline = deadlines.pop()
    summaries = [r.summarise(deadline) for r in runs]
    labels = [s.label for s in summaries]
    if len(set(labels)) < len(labels):  # same directory names: tell them apart by position
        summaries = [
            msgspec.structs.replace(s, label=f"{i}:{s.label}") for i, s in enumerate(summaries)
        ]
    if args.json:
        cmp = compare(summaries, baseline=args.baseline, tolerance=args.tolerance)
        sys.stdout.write(cmp.to_json().decode() + "\n")
    else:
        _console().print(
            render_comparison(
                summaries, args.baseline, rows_are_runs=args.rows, tolerance=args.tolerance
            )
        )
        _print_own_figures(runs, summaries)
    if args.html:
        order = [args.baseline] + [i for i in range(len(runs)) if i != args.baseline]
        _write_html(args.html, [(summaries[i], runs[i].records) for i in order])
    if args.csv:
        _write_csv(args.csv, summaries)
    return 0


def _compare_harness(args: argparse.Namespace) -> int:
    """Env runs side by side: the harness benchmark's table, one column per run."""
    from kvharness.env.harness.summary import load_summary, render_html, render_table

    summaries = [load_summary(Path(d)) for d in args.run_dirs]
    if len({s.label for s in summaries}) < len(summaries):
        summaries = [
            msgspec.structs.replace(s, label=f"{Path(d).name}: {s.label}")
            for d, s in zip(args.run_dirs, summaries, strict=True)
        ]
    if args.json:
        sys.stdout.write(msgspec.json.encode(summaries).decode() + "\n")
    else:
        _console().print(render_table(summaries))
    if args.html:
        try:
            Path(args.html).write_text(render_html(summaries), encoding="utf-8")
        except OSError as err:
            raise UserError(f"--html {args.html}: {err.strerror or err}") from None
        print(f"wrote {args.html}", file=sys.stderr)
    return 0


def _print_own_figures(runs: Sequence[RunData], summaries: Sequence[Summary]) -> None:
    """The figures a run's own tool computed (AIPerf's aggregate) beside kvharness's."""
    from kvharness.report.aiperf import render_own_figures

    for run, summary in zip(runs, summaries, strict=True):
        table = render_own_figures(run, summary)
        if table is not None:
            _console().print(table)


def _write_csv(
    path: str, summaries: list[Summary], records: Sequence[TurnRecord] | None = None
) -> None:
    """The runs' figures to ``path``; with ``records``, those to ``path`` and the figures beside
    it (``x.csv`` -> ``x-summary.csv``)."""
    from kvharness.report.csv_export import write_records_csv, write_summaries_csv

    out = Path(path)
    try:
        if records is not None:
            print(f"wrote {write_records_csv(out, records)}", file=sys.stderr)
            out = out.with_name(f"{out.stem}-summary{out.suffix or '.csv'}")
        print(f"wrote {write_summaries_csv(out, summaries)}", file=sys.stderr)
    except OSError as err:
        raise UserError(f"--csv {path}: {err.strerror or err}") from None


def _write_html(path: str, runs: list[Run]) -> None:
    from kvharness.report.html import write_html

    try:
        out = write_html(path, runs)
    except OSError as err:
        raise UserError(f"--html {path}: {err.strerror or err}") from None
    print(f"wrote {out}", file=sys.stderr)
