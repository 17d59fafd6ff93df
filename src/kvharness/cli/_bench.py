"""`kvharness bench`: replay whole agent sessions against OpenAI-compatible servers.

Without ``--backend`` it runs the simulator's embedded default instead (``kvharness.sim``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from kvharness.cli._args import output_dir
from kvharness.cli._config_args import add_option, add_options, config_from_args, option_help
from kvharness.errors import UserError

HELP = "drive full agent sessions against OpenAI-compatible servers and report per turn"


def register(subparsers: Any) -> None:
    from kvharness.bench.config import BenchConfig

    p = subparsers.add_parser(
        "bench",
        help=HELP,
        description=(
            HELP + ". Sessions run closed loop (each turn waits for the previous one and its "
            "think/tool gap); sessions start open loop. Every attempt is appended to "
            "RUN/records.jsonl as it ends. Fault rule: connection errors, 5xx/429, timeouts and "
            "streams cut before the first token are retried with exponential backoff up to "
            "--max-attempts, then the session is abandoned; other 4xx and faults after the first "
            "token abandon the session at once. Exit status 2 with a one-line reason when turns "
            "failed. Without --backend, runs the simulator's default scenario."
        ),
    )
    sent = p.add_argument_group(
        "what the run sends and when (saved as RUN/config.json, which --resume reads back)"
    )
    add_options(sent, BenchConfig)
    add_option(
        sent, BenchConfig, "mode", choices=("session", "isolated", "both"),
        help=option_help(BenchConfig, "mode") + "; both: one then the other, side by side",
    )  # fmt: skip
    start = sent.add_mutually_exclusive_group()
    add_option(start, BenchConfig, "rate", default=None)
    add_option(start, BenchConfig, "concurrency", default=None)
    start.add_argument(
        "--trace-times",
        action="store_true",
        help="start sessions at the workload's own start times",
    )
    run_group = p.add_argument_group("the run directory and its display")
    run_group.add_argument(
        "--out",
        "-o",
        type=Path,
        default=None,
        metavar="DIR",
        help="run directory (default: runs/bench-<time>)",
    )
    run_group.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the run in DIR: skip finished turns, restart unfinished "
        "sessions at their first unfinished turn (config from DIR/config.json; --backend "
        "points it elsewhere)",
    )
    run_group.add_argument(
        "--no-reset-cache",
        action="store_true",
        help="--mode both: do not reset the servers' prefix caches between passes",
    )
    run_group.add_argument(
        "--reset-cache",
        action="store_true",
        help="reset the engines' prefix caches before the run (vLLM's dev-mode "
        "/reset_prefix_cache; the --metrics-url engines behind a router, else each --backend), "
        "so it starts cold: what kvharness sim --twin replays",
    )
    run_group.add_argument(
        "--csv",
        action="store_true",
        help="also write RUN/records.csv (one row per attempt) and RUN/summary.csv (the run's "
        "figures, one row), for spreadsheets",
    )
    run_group.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    sub = p.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")
    _register_capacity(sub)


def _register_capacity(sub: Any) -> None:
    from kvharness.bench.config import BenchConfig
    from kvharness.cli._capacity import add_search_options

    c = sub.add_parser(
        "capacity",
        help="the most concurrent sessions the backends hold within an SLO tier (live search)",
        description="Search the sessions in flight (doubling, then bisecting) for the most whose "
        "turns meet an SLO tier: each point a bench run from a cold cache of "
        "--sessions-per-slot x N sessions of the workload, N in flight, into OUT/cN. Prints "
        "the points and the capacity per replica; writes OUT/capacity.json.",
    )
    add_options(c, BenchConfig, overrides={"concurrency": {"help": argparse.SUPPRESS}})
    add_search_options(c)
    c.add_argument(
        "--replicas",
        type=int,
        default=None,
        help="replicas behind the backends, for the per-replica figure (default: one per "
        "--backend)",
    )
    c.add_argument("--out", type=Path, default=None, help="where the points' runs go")
    c.set_defaults(func=run_capacity)


def run_capacity(args: argparse.Namespace) -> int:
    from kvharness.bench.config import BenchConfig
    from kvharness.cli._capacity import run_bench_capacity

    if not args.backends:
        raise UserError("give the --backend to search (repeat for several)")

    def config(n: int) -> Any:
        return config_from_args(
            BenchConfig, args, arrival="concurrent", concurrency=n,
            max_sessions=args.sessions_per_slot * n,
        )  # fmt: skip

    return run_bench_capacity(args, config)


def _config(args: argparse.Namespace) -> Any:
    from kvharness.bench.config import BenchConfig
    from kvharness.bench.transport import check_header_name

    start: dict[str, Any] = {}
    if args.rate is not None:
        start = {"arrival": "poisson", "rate": args.rate}
    elif args.concurrency is not None:
        start = {"concurrency": args.concurrency}
        if args.mode == "session":
            start["arrival"] = "concurrent"
    elif args.trace_times:
        start = {"arrival": "trace"}
    if args.session_header is not None:
        try:
            check_header_name(args.session_header)
        except ValueError as err:
            raise UserError(f"--session-header: {err}") from None
    return config_from_args(BenchConfig, args, **start)


def _run_sim_default() -> int:
    try:
        from kvharness.sim import run_default
    except ImportError:
        raise UserError(
            "no --backend given and the simulator's default scenario is not available in this "
            "build; pass --backend URL of an OpenAI-compatible server"
        ) from None
    rows = run_default()
    return 0 if rows else 1


def run(args: argparse.Namespace) -> int:
    from kvharness.bench.run import BenchResult, load_config, reset_prefix_cache, run_bench
    from kvharness.bench.summary import render_result, render_side_by_side

    console = Console()
    progress = not args.no_progress and sys.stderr.isatty()
    results: list[BenchResult] = []
    if args.resume is not None:
        if args.out is not None:
            raise UserError(
                f"--resume {args.resume} continues that run in its own directory; drop --out "
                f"{args.out} (or drop --resume to start a new run there)"
            )
        root = args.resume
        dirs = [root] if (root / "config.json").exists() else [
            d for d in (root / "session", root / "isolated") if (d / "config.json").exists()
        ]  # fmt: skip
        if not dirs:
            raise UserError(f"{root} is not a bench run directory (no config.json)")
        for d in dirs:
            cfg = load_config(d)
            if args.backends:
                try:
                    cfg = dataclasses.replace(cfg, backends=tuple(args.backends))
                except ValueError as err:
                    raise UserError(str(err)) from None
            results.append(run_bench(cfg, d, resume=True, progress=progress))
    else:
        if not args.backends:
            return _run_sim_default()
        cfg = _config(args)
        root = output_dir(
            args.out or Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S"),
            "--out" if args.out else "run directory",
        )
        if cfg.text_prompts and cfg.tokenizer is None:
            flag = "--api chat" if cfg.api == "chat" else "--prompt-format text"
            console.print(
                f"[yellow]{flag} without --tokenizer: built-in words, so prompt token counts and "
                "ideal cached tokens are approximate; pass the served model's --tokenizer[/]"
            )
        modes = ("session", "isolated") if args.mode == "both" else (args.mode,)
        for mode in modes:
            mcfg = dataclasses.replace(cfg, mode=mode, label=cfg.label or mode)
            if args.reset_cache or (len(modes) > 1 and not args.no_reset_cache):
                for t in mcfg.scraped:
                    if not reset_prefix_cache(t):
                        console.print(
                            f"[yellow]{t} offers no /reset_prefix_cache: the {mode} pass may start "
                            "with a warm cache[/]"
                        )
            out = root / mode if len(modes) > 1 else root
            results.append(run_bench(mcfg, out, progress=progress))
    if len(results) == 2:
        console.print(
            render_side_by_side(
                [r.run_dir.name for r in results],
                [r.records for r in results],
                [r.summary for r in results],
                [r.server for r in results],
            )
        )
    else:
        r = results[0]
        console.print(render_result(r.run_dir.name, r.records, r.summary, r.server))
    if args.csv:
        from kvharness.report.csv_export import write_records_csv, write_summaries_csv
        from kvharness.report.metrics import summarise

        for r in results:
            summary = r.summary or summarise(r.records, label=r.run_dir.name)
            write_records_csv(r.run_dir / "records.csv", r.records)
            write_summaries_csv(r.run_dir / "summary.csv", [summary])
    console.print(f"run directory: {root}")
    failures = [line for r in results if (line := r.failure_line()) is not None]
    if failures:
        raise UserError("; ".join(failures))
    return 0
