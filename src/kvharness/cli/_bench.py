"""`kvharness bench`: replay whole agent sessions against OpenAI-compatible servers.

Without ``--target`` it runs the simulator's embedded default instead (``kvharness.sim``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from kvharness.cli._args import (
    block_size,
    bounded,
    non_negative_float,
    output_dir,
    positive_float,
    positive_int,
)
from kvharness.errors import UserError

HELP = "drive full agent sessions against OpenAI-compatible servers and report per turn"


def register(subparsers: Any) -> None:
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
            "failed. Without --target, runs the simulator's default scenario."
        ),
    )
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="URL",
        help="base URL of a server (repeat for several; sessions go round robin)",
    )
    p.add_argument(
        "--workload",
        "-w",
        metavar="SPEC",
        default=None,
        help="workload: a kvharness workload file, SWE-agent .traj file/folder, "
        "Mooncake hash_ids JSONL, or synthetic[:k=v,...] (default: synthetic)",
    )
    p.add_argument(
        "--mode",
        choices=("session", "isolated", "both"),
        default="session",
        help="session: turns in order with their gaps; isolated: the same turns as "
        "independent shuffled requests (a chat benchmark's view); both: one "
        "then the other, side by side (default: session)",
    )
    p.add_argument(
        "--out",
        "-o",
        type=Path,
        default=None,
        metavar="DIR",
        help="run directory (default: runs/bench-<time>)",
    )
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the run in DIR: skip finished turns, restart unfinished "
        "sessions at their first unfinished turn (config from DIR/config.json)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="model name to send (default: the first one the first target lists)",
    )
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--rate",
        type=positive_float,
        default=None,
        metavar="R",
        help="start sessions as a Poisson process of R sessions/s",
    )
    start.add_argument(
        "--concurrency",
        type=positive_int,
        default=None,
        metavar="N",
        help="keep N sessions in flight (isolated mode: N requests in flight)",
    )
    start.add_argument(
        "--trace-times",
        action="store_true",
        help="start sessions at the workload's own start times",
    )
    p.add_argument(
        "--time-scale",
        type=positive_float,
        default=1.0,
        metavar="X",
        help="multiply start times and gaps by X (0.5 = twice as fast; default 1)",
    )
    p.add_argument(
        "--max-sessions",
        type=positive_int,
        default=None,
        metavar="N",
        help="run only the workload's first N sessions",
    )
    p.add_argument(
        "--vocab-size",
        type=bounded(int, 1, 1 << 31),
        default=1024,
        metavar="V",
        help="token ids of materialised prompts lie in [0, V); any model with at "
        "least V tokens serves them (default 1024)",
    )
    p.add_argument(
        "--engine-block-size",
        type=block_size,
        default=128,
        metavar="B",
        help="the server's KV block size in tokens, for ideal cached tokens (default 128)",
    )
    p.add_argument(
        "--workload-block-size",
        type=block_size,
        default=512,
        metavar="B",
        help="block size of hash_ids traces (default 512, Mooncake's)",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="PATH",
        help="the served model's tokenizer (tokenizer.json or its folder): tokenises SWE-agent "
        "trajectories, and picks the words of --prompt-format text",
    )
    p.add_argument(
        "--prompt-format",
        choices=("tokens", "text"),
        default="tokens",
        help="how hash-only turns (Mooncake, synthetic) go to /v1/completions: tokens, a list "
        "of token ids; text, a string of one word per token, each after a space, for servers "
        "and routers that take text only (e.g. sglang-router). With --tokenizer the words are "
        "vocabulary entries verified to be one token each, so the server sees exactly the "
        "workload's tokens plus its tokenizer's BOS and ideal cached tokens stay exact; without "
        "it a built-in word list is used and the ideal is approximate (default tokens)",
    )
    hdr = p.add_mutually_exclusive_group()
    hdr.add_argument(
        "--session-header",
        default="x-session-id",
        metavar="NAME",
        help="HTTP header carrying the session id on every request of session mode, for "
        "session-aware routers (default x-session-id; isolated mode never sends it)",
    )
    hdr.add_argument(
        "--no-session-header",
        action="store_true",
        help="send no session header",
    )
    p.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="do not send ignore_eos (for servers that reject it)",
    )
    p.add_argument(
        "--max-attempts",
        type=bounded(int, 1, 1000),
        default=3,
        metavar="N",
        help="attempts per turn for retryable faults (default 3)",
    )
    p.add_argument(
        "--backoff",
        type=non_negative_float,
        default=0.5,
        metavar="S",
        help="seconds before the first retry, doubled each time (default 0.5)",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=300.0,
        metavar="S",
        help="seconds one attempt may take (default 300)",
    )
    p.add_argument(
        "--connect-timeout",
        type=positive_float,
        default=10.0,
        metavar="S",
        help="seconds to open a connection (default 10)",
    )
    p.add_argument(
        "--event-loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="event loop: uvloop when installed (auto, the default), or asyncio's",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of shuffles and Poisson arrivals")
    p.add_argument("--label", default=None, help="name of the run in reports")
    p.add_argument(
        "--no-metrics",
        action="store_true",
        help="do not scrape the targets' Prometheus /metrics before and after",
    )
    p.add_argument(
        "--no-reset-cache",
        action="store_true",
        help="--mode both: do not reset the servers' prefix caches between passes",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _config(args: argparse.Namespace) -> Any:
    from kvharness.bench.config import BenchConfig, RetryPolicy
    from kvharness.bench.transport import check_header_name

    arrival = "workload"
    if args.rate is not None:
        arrival = "poisson"
    elif args.concurrency is not None and args.mode == "session":
        arrival = "concurrent"
    elif args.trace_times:
        arrival = "trace"
    header = None if args.no_session_header else args.session_header
    if header is not None:
        try:
            check_header_name(header)
        except ValueError as err:
            raise UserError(f"--session-header: {err}") from None
    targets = tuple(t.rstrip("/") for t in args.target)
    for t in targets:
        if not t.startswith(("http://", "https://")):
            raise UserError(f"--target {t!r} is not an http(s):// URL")
    return BenchConfig(
        targets=targets,
        workload=args.workload or "synthetic",
        model=args.model,
        arrival=arrival,  # type: ignore[arg-type]
        rate=args.rate or 1.0,
        concurrency=args.concurrency or 0,
        time_scale=args.time_scale,
        vocab_size=args.vocab_size,
        engine_block_size=args.engine_block_size,
        workload_block_size=args.workload_block_size,
        tokenizer=args.tokenizer,
        prompt_format=args.prompt_format,
        session_header=header,
        ignore_eos=not args.no_ignore_eos,
        max_sessions=args.max_sessions,
        seed=args.seed,
        retry=RetryPolicy(
            max_attempts=args.max_attempts,
            backoff=args.backoff,
            timeout=args.timeout,
            connect_timeout=args.connect_timeout,
        ),
        scrape_metrics=not args.no_metrics,
        event_loop=args.event_loop,
        label=args.label,
    )


def _run_sim_default() -> int:
    try:
        from kvharness.sim import run_default
    except ImportError:
        raise UserError(
            "no --target given and the simulator's default scenario is not available in this "
            "build; pass --target URL of an OpenAI-compatible server"
        ) from None
    rows = run_default()
    return 0 if rows else 1


def run(args: argparse.Namespace) -> int:
    import msgspec

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
            if args.target:
                cfg = msgspec.structs.replace(
                    cfg, targets=tuple(t.rstrip("/") for t in args.target)
                )
            results.append(run_bench(cfg, d, resume=True, progress=progress))
    else:
        if not args.target:
            return _run_sim_default()
        cfg = _config(args)
        root = output_dir(
            args.out or Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S"),
            "--out" if args.out else "run directory",
        )
        if cfg.prompt_format == "text" and cfg.tokenizer is None:
            console.print(
                "[yellow]--prompt-format text without --tokenizer: built-in words, so prompt "
                "token counts and ideal cached tokens are approximate[/]"
            )
        modes = ("session", "isolated") if args.mode == "both" else (args.mode,)
        for mode in modes:
            mcfg = msgspec.structs.replace(cfg, mode=mode, label=cfg.label or mode)
            if len(modes) > 1 and not args.no_reset_cache:
                for t in mcfg.targets:
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
    console.print(f"run directory: {root}")
    failures = [line for r in results if (line := r.failure_line()) is not None]
    if failures:
        raise UserError("; ".join(failures))
    return 0
