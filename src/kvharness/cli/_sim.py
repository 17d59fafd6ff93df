"""`kvharness sim`: simulate a serving cluster under routing policies; `kvharness sim --twin RUN`
(a bench run replayed and compared); `kvharness sim calibrate RUN...` (a measured engine)."""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import math
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
_HOST_CORES_HELP = (
    "the replicas shared one host of N cores, bound to them in turn as kvharness's test replicas "
    "are (replica i on core i mod N): replicas on one core split its time (default 0: each "
    "replica has hardware of its own)"
)


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
    p.add_argument(
        "--twin",
        default=None,
        metavar="RUN_DIR",
        help="simulate exactly what the bench run in RUN_DIR did (its sessions, arrivals, "
        "gaps, replicas and routing) on the engines of --profile, and compare turn by turn: "
        "writes twin.json, turns.jsonl and twin.html to --out (default RUN_DIR/twin)",
    )
    p.add_argument(
        "--profile",
        default=None,
        metavar="PATH",
        help="with --twin: the measured engine (kvharness sim calibrate RUN_DIR... --out PATH)",
    )
    p.add_argument(
        "--router",
        default=None,
        metavar="POLICY",
        help="with --twin: the run went through a router with this policy (a kvharness policy, "
        "NAME or NAME:KEY=VALUE,...) to --router-replicas replicas (default: straight to its "
        "backends)",
    )
    p.add_argument(
        "--router-replicas", type=positive_int, default=None, help="replicas behind --router"
    )
    p.add_argument(
        "--host-cores",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="with --twin: " + _HOST_CORES_HELP,
    )
    p.set_defaults(func=run)
    sub = p.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    c = sub.add_parser(
        "calibrate",
        help="fit a measured engine's profile to bench runs (the digital twin's engine)",
        description="Fit the engine of the deployment a bench run measured: its step time "
        "(overhead, per prefill token, per decoded sequence, per attention pair) and request "
        "latency, by simulating each run's twin and matching every turn's TTFT and end-to-end "
        "time; its KV capacity from what the bench read of the engines. The profile is saved "
        "as JSON for --cluster NxPROFILE:PATH and kvharness sim --twin. With --samples, fit "
        "the roofline's efficiency factors to a JSON Lines file of measured step or request "
        "times instead.",
    )
    c.add_argument("runs", nargs="*", metavar="RUN_DIR", help="bench run directories")
    c.add_argument("--out", default=None, help="write the profile (or fitted factors) here")
    c.add_argument("--name", default=None, help="the profile's name (default: the model's)")
    c.add_argument(
        "--router",
        default=None,
        metavar="POLICY",
        help="the runs went through a router with this policy (a kvharness policy, NAME or "
        "NAME:KEY=VALUE,...) to --replicas replicas; default: straight to their backends",
    )
    c.add_argument("--replicas", type=positive_int, default=None, help="replicas behind --router")
    c.add_argument(
        "--host-cores",
        type=non_negative_int,
        default=0,
        metavar="N",
        help=_HOST_CORES_HELP,
    )
    c.add_argument(
        "--max-num-batched-tokens",
        type=positive_int,
        default=None,
        help="the engine's token budget per step (default: vLLM's CPU server default, 2048; "
        "with --samples, the prefill chunk size, 8192)",
    )
    c.add_argument(
        "--max-num-seqs",
        type=positive_int,
        default=128,
        help="the engine's most running requests (default: vLLM's CPU server default, 128)",
    )
    c.add_argument(
        "--num-blocks",
        type=positive_int,
        default=None,
        help="KV cache blocks per replica (default: what the bench read of the engines)",
    )
    c.add_argument(
        "--evaluations",
        type=positive_int,
        default=400,
        help="simulations the fit may run (default: %(default)s)",
    )
    c.add_argument(
        "--samples",
        default=None,
        metavar="FILE",
        help='JSON Lines of measured times: {"prefill_tokens", "context_tokens", '
        '"decode_seqs", "decode_ctx", "seconds"} per step, or {"prompt_tokens", '
        '"cached_tokens", "output_tokens", "seconds"} per request served alone',
    )
    c.add_argument(
        "--cluster",
        default="1xH200:llama-3.1-8b",
        help="with --samples: the deployment measured (default: %(default)s)",
    )
    c.set_defaults(func=run_calibrate)
    k = sub.add_parser(
        "capacity",
        help="the most concurrent sessions a simulated deployment holds within an SLO tier",
        description="The search of `kvharness bench capacity` in the simulator: on a measured "
        "engine (--cluster NxPROFILE:PATH, the twin's prediction of the live search) or on a "
        "preset cluster at fleet scale (agents per GPU). Each point simulates "
        "--sessions-per-slot x N sessions of the workload with N in flight.",
    )
    k.add_argument("--workload", default="synthetic", help="workload spec (default: synthetic)")
    k.add_argument(
        "--cluster",
        default="1xH200:llama-3.1-8b",
        help="NxHARDWARE:MODEL or NxPROFILE:PATH (default: %(default)s)",
    )
    k.add_argument(
        "--policy",
        default="agent_aware",
        help="routing policy over several replicas (default: %(default)s; one replica: none)",
    )
    k.add_argument(
        "--host-cores",
        type=non_negative_int,
        default=0,
        metavar="N",
        help=_HOST_CORES_HELP,
    )
    k.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply the workload's gaps by X, as kvharness bench --time-scale (default: 1)",
    )
    k.add_argument(
        "--block-size", type=block_size, default=None, help="engine KV block size (default 128)"
    )
    from kvharness.cli._capacity import add_search_options

    add_search_options(k)
    k.add_argument("--out", default=None, help="where capacity.json goes")
    k.set_defaults(func=run_capacity)


def run_calibrate(args: argparse.Namespace) -> int:
    if args.out:
        output_file(args.out, "--out")
    if args.samples is not None:
        if args.runs:
            raise UserError("give bench run directories or --samples FILE, not both")
        return _calibrate_samples(args)
    if not args.runs:
        raise UserError("give the bench run directories to calibrate from (or --samples FILE)")
    return _calibrate_runs(args)


def _calibrate_samples(args: argparse.Namespace) -> int:
    from kvharness.engine.calibrate import calibrate, read_samples
    from kvharness.sim.cluster import parse_cluster

    dep = parse_cluster(args.cluster).deployment
    fit = calibrate(dep, read_samples(args.samples, args.max_num_batched_tokens or 8192))
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


def _calibrate_runs(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from kvharness.engine.profile import EngineProfile
    from kvharness.sim.fit import fit_profile
    from kvharness.sim.twin import load_run

    runs = [
        load_run(Path(r), router=args.router, replicas=args.replicas, host_cores=args.host_cores)
        for r in args.runs
    ]
    engines = [e for r in runs for e in r.engines]
    block = engines[0]["block_size"] if engines else runs[0].config.engine_block_size
    blocks = args.num_blocks or (min(e["num_gpu_blocks"] for e in engines) if engines else None)
    if blocks is None:
        raise UserError(
            "the runs hold no engine KV capacity (their /metrics said none): give --num-blocks"
        )
    base = EngineProfile(
        name=args.name or runs[0].config.model or "measured",
        block_size=block,
        num_blocks=blocks,
        max_num_batched_tokens=args.max_num_batched_tokens or 2048,
        max_num_seqs=args.max_num_seqs,
    )
    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        job = bar.add_task("fitting", total=args.evaluations)
        fit = fit_profile(
            runs,
            base,
            max_evaluations=args.evaluations,
            on_step=lambda n, best: bar.update(
                job, completed=n, description=f"fitting (loss {best:.4f})"
            ),
        )
    p = fit.profile
    print(
        f"fitted {p.name} to {len(runs)} run(s), {p.fit['turns']} turns, in {fit.seconds:.1f} s "
        f"({fit.evaluations} simulations): rms log error {p.fit['rms_log_error']:.3f} "
        f"(from {math.sqrt(fit.loss_start / 2):.3f})"
    )
    print(
        f"  step {1000 * p.step_overhead_s:.3f} ms + {1e6 * p.prefill_token_s:.3f} us/prefill "
        f"token + {1000 * p.decode_seq_s:.3f} ms/decoded sequence + {1e9 * p.pair_s:.3f} "
        f"ns/attention pair; request latency {1000 * p.request_latency_s:.2f} ms; KV "
        f"{p.num_blocks} blocks of {p.block_size}"
    )
    if args.out:
        p.save(Path(args.out))
        print(f"wrote {args.out} (use it as --cluster NxPROFILE:{args.out})", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.twin is not None:
        return run_twin(args)
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


def run_capacity(args: argparse.Namespace) -> int:
    from kvharness.cli._capacity import run_sim_capacity

    return run_sim_capacity(args)


def run_twin(args: argparse.Namespace) -> int:
    from kvharness.engine.profile import EngineProfile
    from kvharness.sim.twin import compare, load_run, twin_simulation, write_twin

    if args.profile is None:
        raise UserError(
            "--twin needs the engine: give --profile PATH (kvharness sim calibrate RUN_DIR... "
            "--out PATH fits one)"
        )
    run = load_run(
        Path(args.twin),
        router=args.router,
        replicas=args.router_replicas,
        host_cores=args.host_cores,
    )
    profile = EngineProfile.load(Path(args.profile))
    out = Path(args.out) if args.out else Path(args.twin) / "twin"
    output_dir(out, "--out")
    result = twin_simulation(run, profile)
    pairs, summary = compare(run, result.records)
    write_twin(out, run, profile, pairs, summary)
    print(f"twin of {run.path} on {profile.name}: {summary.line()}")
    if summary.blame:
        parts = ", ".join(f"{k} {v}" for k, v in summary.blame.items())
        print(f"  the worst turns were off in: {parts}")
    print(f"wrote {out}/twin.json, turns.jsonl and twin.html", file=sys.stderr)
    return 0


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
