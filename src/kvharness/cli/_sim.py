"""`kvharness sim`: simulate a serving cluster under routing policies; `kvharness sim calibrate`."""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console

from kvharness.cli._args import block_size, non_negative_int, output_dir, output_file, positive_int
from kvharness.engine.cascade import ATTENTIONS
from kvharness.errors import UserError

HELP = "simulate a cluster of engine replicas under routing policies (virtual time)"


def _floats(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got {text!r}"
        ) from None
    if not out or any(not 0 < v < float("inf") for v in out):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return out


def _ints(text: str) -> list[int]:
    try:
        out = [positive_int(x) for x in text.split(",") if x.strip()]
    except argparse.ArgumentTypeError:
        out = []
    if not out:
        raise argparse.ArgumentTypeError(
            f"expected whole numbers >= 1 separated by commas, got {text!r}"
        )
    return out


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sim",
        help=HELP,
        description=HELP + ". Prints one table per cluster and load with policies as rows, and "
        "writes a run directory (records, config, summary, HTML) per run.",
    )
    p.add_argument(
        "--workload",
        default="synthetic",
        help="workload spec: a file (kvharness format, Mooncake hash_ids JSONL, SWE-agent .traj "
        "or folder), synthetic[:key=value,...], fixed[:key=value,...], "
        "computer-use[:key=value,...] or long-horizon[:key=value,...] (default: synthetic)",
    )
    p.add_argument(
        "--cluster",
        default="16xH200:llama-3.3-70b",
        help="NxHARDWARE:MODEL[:tpK][:fp8|bf16][:kv-DTYPE]; hardware H100/H200/B200, models "
        "llama-3.1-8b, llama-3.3-70b, qwen3-32b, moe-230b-a10b; vision-language: qwen2.5-vl-7b, "
        "qwen2.5-vl-72b, for image workloads (default: %(default)s)",
    )
    p.add_argument(
        "--replicas",
        type=_ints,
        default=None,
        help="cluster sizes to sweep, comma-separated (overrides N of --cluster)",
    )
    p.add_argument(
        "--policy", default="all", help="routing policies, comma-separated, or 'all' (default)"
    )
    p.add_argument(
        "--load",
        type=_floats,
        default=[1.0],
        help="session arrival-rate multipliers, comma-separated (default: 1)",
    )
    p.add_argument(
        "--deadline",
        default="1.5x",
        help="session deadline for goodput: seconds (600) or a factor of the session's lower "
        "bound (1.5x, default)",
    )
    p.add_argument(
        "--eviction", choices=["lru", "ttl"], default="lru", help="KV eviction policy (default lru)"
    )
    p.add_argument(
        "--attention",
        choices=list(ATTENTIONS),
        default="default",
        help="decode attention kernel of every replica: "
        + "; ".join(f"{k} = {v}" for k, v in ATTENTIONS.items())
        + " (default: %(default)s)",
    )
    p.add_argument(
        "--cpu-tier-blocks",
        type=non_negative_int,
        default=0,
        help="host-memory offload tier per replica, in blocks (default 0: none)",
    )
    p.add_argument(
        "--block-size",
        type=block_size,
        default=None,
        help="engine KV block size in tokens (default: the workload's block size)",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=positive_int,
        default=8192,
        help="token budget per engine step",
    )
    p.add_argument(
        "--max-num-seqs", type=positive_int, default=256, help="most running requests per replica"
    )
    p.add_argument("--out", default=None, help="output folder (default runs/sim-<UTC time>)")
    p.add_argument(
        "--executor",
        choices=["auto", "ray", "process", "serial"],
        default="auto",
        help="how to run the sweep: auto = Ray when --ray-address or RAY_ADDRESS names a "
        "cluster, else a process pool",
    )
    p.add_argument(
        "--jobs", type=positive_int, default=None, help="worker processes (default: CPU count)"
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster address (ray://host:10001, host:6379, or local for a private "
        "one-machine cluster); default RAY_ADDRESS",
    )
    p.set_defaults(func=run)
    sub = p.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    c = sub.add_parser(
        "calibrate",
        help="fit the cost model's efficiency factors to measured step or request times",
        description="Fit compute/memory efficiency and per-step overhead by least squares. "
        'SAMPLES is JSON Lines: {"prefill_tokens", "context_tokens", "decode_seqs", "decode_ctx", '
        '"seconds"} per step, or {"prompt_tokens", "cached_tokens", "output_tokens", "seconds"} '
        "per request served alone.",
    )
    c.add_argument("samples", help="JSON Lines file of measured times")
    c.add_argument(
        "--cluster",
        default="1xH200:llama-3.1-8b",
        help="the deployment measured, as for kvharness sim (default: %(default)s)",
    )
    c.add_argument(
        "--max-num-batched-tokens",
        type=positive_int,
        default=8192,
        help="prefill chunk size of requests",
    )
    c.add_argument("--out", default=None, help="write the fitted factors here as JSON")
    c.set_defaults(func=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    from kvharness.engine.calibrate import calibrate, read_samples
    from kvharness.sim.cluster import parse_cluster

    if args.out:
        output_file(args.out, "--out")
    dep = parse_cluster(args.cluster).deployment
    fit = calibrate(dep, read_samples(args.samples, args.max_num_batched_tokens))
    data = {
        "cluster": args.cluster,
        "efficiency": msgspec.to_builtins(fit.efficiency),
        "rmse_rel": fit.rmse_rel,
        "samples": fit.samples,
        "iterations": fit.iterations,
    }
    text = json.dumps(data, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    from kvharness.report.io import parse_deadline
    from kvharness.routing.registry import available_policies
    from kvharness.sim.cluster import parse_cluster

    names = available_policies()
    policies = names if args.policy == "all" else [p.strip() for p in args.policy.split(",") if p]
    for pol in policies:
        if pol not in names:
            raise UserError(f"unknown policy {pol!r}; choose from {', '.join(names)} or all")
    parse_deadline(args.deadline)
    _check_workload(args.workload)
    base = parse_cluster(args.cluster)
    sizes = args.replicas or [base.replicas]
    head = args.cluster.split("x", 1)[1]
    clusters = [f"{n}x{head}" for n in sizes]
    out = output_dir(
        args.out or f"runs/sim-{_dt.datetime.now(_dt.UTC):%Y%m%d-%H%M%S}",
        "--out" if args.out else "output folder",
    )
    return sweep(args, clusters, policies, out)


def _check_workload(spec: str) -> None:
    """Refuse a bad synthetic spec or a missing file here, before the sweep's workers load it."""
    from kvharness.workload.load import (
        parse_computer_use,
        parse_fixed,
        parse_long_horizon,
        parse_synthetic,
    )

    name = spec.partition(":")[0]
    parsers = {
        "synthetic": parse_synthetic,
        "fixed": parse_fixed,
        "computer-use": parse_computer_use,
        "long-horizon": parse_long_horizon,
    }
    if name in parsers:
        parsers[name](spec)
    elif not Path(spec).exists():
        raise UserError(f"--workload {spec}: no such file or folder")


def sweep(args: argparse.Namespace, clusters: list[str], policies: list[str], out: Path) -> int:
    from kvharness.engine.scheduler import SchedulerConfig
    from kvharness.report.html import write_html
    from kvharness.report.io import load_run, parse_deadline
    from kvharness.report.metrics import Summary
    from kvharness.sim.cluster import parse_cluster
    from kvharness.sim.simulator import SimConfig
    from kvharness.sim.summary import PolicyRow, render_rows
    from kvharness.sim.sweep import SimJob, job_dir, run_sweep

    deadline = parse_deadline(args.deadline)
    scheduler = SchedulerConfig(args.max_num_batched_tokens, args.max_num_seqs)
    block_size = 16 if args.block_size is None else args.block_size
    specs = {c: parse_cluster(c, block_size=block_size) for c in clusters}
    grid = list(itertools.product(clusters, args.load, policies))
    runs = [
        SimJob(
            args.workload,
            SimConfig(
                specs[c],
                p,
                scheduler=scheduler,
                eviction=args.eviction,
                cpu_tier_blocks=args.cpu_tier_blocks,
                load=load,
                attention=args.attention,
            ),
            deadline=args.deadline,
            out=job_dir(out, c, load, p),
            workload_block_size=args.block_size is None,
        )
        for c, load, p in grid
    ]
    # Piped, rich would assume 80 columns: the tables' width then, unless COLUMNS says.
    console = Console() if sys.stdout.isatty() or os.environ.get("COLUMNS") else Console(width=140)
    console.print(
        f"simulating {len(runs)} run(s): {len(policies)} policies x {len(args.load)} loads x "
        f"{len(clusters)} clusters, workload {args.workload!r}",
        style="dim",
    )
    rows = run_sweep(
        runs,
        executor=args.executor,
        jobs=args.jobs,
        ray_address=args.ray_address,
        on_row=lambda job, r: console.print(
            f"  {r.cluster} load {r.load:g} {r.policy}: {r.turns} turns, "
            f"{r.sim_seconds:.0f} s simulated in {r.wall_seconds:.1f} s",
            style="dim",
        ),
    )
    groups: dict[tuple[str, float], list[tuple[SimJob, PolicyRow]]] = {}
    for (c, load, _), job, r in zip(grid, runs, rows, strict=True):
        groups.setdefault((c, load), []).append((job, r))
    for (cluster, load), items in groups.items():
        console.print(
            render_rows(
                [r for _, r in items],
                deadline,
                f"{items[0][1].cluster} · load x{load:g} · {args.workload}",
            )
        )
        reports = []
        for job, _ in items:
            assert job.out is not None
            summary = Summary.from_json((Path(job.out) / "summary.json").read_bytes())
            reports.append((summary, load_run(job.out).records))
        write_html(
            Path(job_dir(out, cluster, load, "report.html")),
            reports,
            title=f"{cluster} load {load:g}",
        )
    (out / "sim.json").write_text(
        json.dumps(
            {
                "workload": args.workload,
                "deadline": args.deadline,
                "rows": [msgspec.to_builtins(r) for r in rows],
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}/sim.json and a run directory per run under {out}/", file=sys.stderr)
    return 0
