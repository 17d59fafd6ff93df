"""``kvharness workload``: inspect and convert agent-session workloads."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from kvharness.cli._args import block_size, output_dir, output_file
from kvharness.workload import formats
from kvharness.workload.computer_use import ComputerUseConfig
from kvharness.workload.fixed import FixedConfig
from kvharness.workload.load import load_workload
from kvharness.workload.long_horizon import LongHorizonConfig
from kvharness.workload.model import Workload
from kvharness.workload.stats import Distribution, WorkloadStats, workload_stats
from kvharness.workload.synthetic import SyntheticConfig

HELP = "inspect and convert agent-session workloads (traces, trajectories, synthetic)"

_SPEC_HELP = (
    "workload: a trace file or folder in any format `kvharness workload formats` lists (its "
    "format is told from its contents), a gateway recording, 'synthetic[:key=value,...]' (coding-agent "
    "sessions), 'fixed[:key=value,...]' (independent requests of one shape) or "
    "'computer-use[:key=value,...]' (a screenshot after every action) or "
    "'long-horizon[:key=value,...]' (thousands of turns, compacted at the window) "
    "(default: synthetic)"
)

_SHARING = {
    "hashes": "known: the trace names its blocks",
    "content": "known: its text, tokenised",
    "none": "not recorded (lengths only): no prompt shares a block, so the ideal hit ratio "
    "says nothing about real reuse",
}


def _synthetic_epilog() -> str:
    lines = []
    for name, cls in (
        ("synthetic", SyntheticConfig),
        ("fixed", FixedConfig),
        ("computer-use", ComputerUseConfig),
        ("long-horizon", LongHorizonConfig),
    ):
        lines.append(f"{name} options ({name}:key=value,...):")
        for f in dataclasses.fields(cls):
            bounds = f.metadata["bounds"]
            span = f"; {bounds[0]} to {bounds[1]}" if bounds is not None else ""
            lines.append(f"  {f.name:<20} {f.metadata['help']} (default {f.default}{span})")
    return "\n".join(lines)


def _add_source_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", nargs="?", default="synthetic", metavar="WORKLOAD", help=_SPEC_HELP)
    p.add_argument(
        "--format",
        dest="fmt",
        default=None,
        metavar="NAME",
        help="read the input as this format instead of telling it from the contents "
        "(`kvharness workload formats` lists them)",
    )
    p.add_argument(
        "--block-size",
        type=block_size,
        default=None,
        help="tokens per hash id of hash_ids traces (default: 512, Mooncake's)",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="PATH",
        help="tokenizer.json (or its folder) for formats that carry text: trajectories, spans, "
        "request logs (default: a built-in approximation, no download)",
    )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("workload", help=HELP, description=HELP)
    sub = parser.add_subparsers(dest="workload_command", metavar="ACTION", required=True)

    stats = sub.add_parser(
        "stats",
        help="requests, sessions, lengths, gaps, appends and the ideal prefix-hit ratio",
        description="Statistics of a workload: requests, sessions, turns per session, "
        "input/output lengths, gaps, per-turn appends, prompt growth by turn, and the ideal "
        "prefix-cache hit ratio (an infinite cache on one replica), token- and block-weighted.",
        epilog=_synthetic_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_source_options(stats)
    stats.add_argument("--json", action="store_true", help="print JSON instead of a table")
    stats.set_defaults(func=_run_stats)

    writable = ", ".join(f.name for f in formats.writable())
    convert = sub.add_parser(
        "convert",
        help=f"write any workload source in another format ({writable})",
        description="Load a workload from any source (a gateway recording included) and write "
        "it in kvharness's versioned workload format (docs/workload-format.md), as agentic "
        "Mooncake rows (AIPerf and Dynamo replay them), as OpenTelemetry GenAI spans (OTLP JSON) "
        "or as Harbor ATIF trajectories (docs/trace-formats.md says what each keeps).",
        epilog=_synthetic_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_source_options(convert)
    convert.add_argument(
        "output", help="path of the file to write (of a new or empty folder for --to atif)"
    )
    convert.add_argument(
        "--to",
        default="kvharness",
        choices=[f.name for f in formats.writable()],
        help="the format to write (default: kvharness)",
    )
    convert.set_defaults(func=_run_convert)

    listing = sub.add_parser(
        "formats",
        help="the trace formats kvharness reads and writes",
        description="Every trace format kvharness reads (and those it writes), in the order "
        "detection tries them.",
    )
    listing.set_defaults(func=_run_formats)


def _load(args: argparse.Namespace) -> Workload:
    return load_workload(
        args.spec, block_size=args.block_size, tokenizer=args.tokenizer, fmt=args.fmt
    )


def _run_convert(args: argparse.Namespace) -> int:
    if formats.by_name(args.to).per_session:
        output_dir(args.output, "OUTPUT")
    else:
        output_file(args.output, "OUTPUT")
    workload = _load(args)
    formats.save_as(workload, Path(args.output), args.to)
    print(
        f"wrote {len(workload.sessions)} sessions, {workload.num_turns} turns as {args.to} "
        f"to {args.output} (block size {workload.block_size})"
    )
    return 0


def _run_formats(args: argparse.Namespace) -> int:
    table = Table(box=box.SIMPLE)
    for col in ("format", "reads", "writes", "what it is"):
        table.add_column(col)
    for f in formats.formats():
        table.add_row(f.name, "yes", "yes" if f.save else "", f.summary)
    Console().print(table)
    return 0


def _dist_row(table: Table, label: str, d: Distribution, unit: str = "", digits: int = 0) -> None:
    fmt = f"{{:,.{digits}f}}"
    table.add_row(label, *(fmt.format(v) + unit for v in (d.mean, d.p50, d.p90, d.p99, d.max)))


def render_stats(s: WorkloadStats, console: Console) -> None:
    head = Table(title=f"workload {s.name}", show_header=False, box=None)
    head.add_column(style="bold")
    head.add_column(justify="right")
    head.add_row("format", s.format)
    head.add_row("prefix sharing", _SHARING.get(s.sharing, s.sharing))
    head.add_row("requests (turns)", f"{s.requests:,}")
    head.add_row("sessions", f"{s.sessions:,}")
    head.add_row("multi-turn sessions", f"{s.multi_turn_sessions:,}")
    head.add_row("input / output tokens", f"{s.total_input_tokens:,} / {s.total_output_tokens:,}")
    head.add_row("block size", f"{s.block_size}")
    unknown = s.sharing == "none"
    for weight, ratio in (
        ("tokens", s.ideal_hit_ratio_tokens),
        ("blocks", s.ideal_hit_ratio_blocks),
    ):
        head.add_row(f"ideal prefix-hit ratio ({weight})", "n/a" if unknown else f"{ratio:.1%}")
    if s.distinct_images:
        head.add_row(
            "image tokens (share of input)", f"{s.image_tokens:,} ({s.image_token_share:.1%})"
        )
        head.add_row("distinct images", f"{s.distinct_images:,}")
        head.add_row(
            "ideal misses: image / text tokens",
            f"{s.ideal_miss_image_tokens:,} / {s.ideal_miss_text_tokens:,}",
        )
        head.add_row("ideal misses: images seen before", f"{s.ideal_miss_seen_image_tokens:,}")
    console.print(head)

    dist = Table(title="distributions")
    for col in ("", "mean", "p50", "p90", "p99", "max"):
        dist.add_column(col, justify="left" if not col else "right")
    _dist_row(dist, "turns per session", s.turns_per_session)
    _dist_row(dist, "turns per multi-turn session", s.turns_per_multi_turn_session)
    _dist_row(dist, "input tokens", s.input_tokens)
    _dist_row(dist, "output tokens", s.output_tokens)
    if s.distinct_images:
        _dist_row(dist, "images per turn", s.images_per_turn, digits=1)
    _dist_row(dist, "append tokens per turn", s.append_tokens)
    _dist_row(dist, "gap before turn (s)", s.gap_seconds, digits=2)
    console.print(dist)

    growth = Table(title="median prompt tokens by turn index (k = 1,000)", box=box.SIMPLE)
    shown = s.prompt_tokens_by_turn[:10]
    for i in range(len(shown)):
        growth.add_column(str(i), justify="right")
    growth.add_row(*(f"{v / 1000:.1f}k" for v in shown))
    console.print(growth)


def _run_stats(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    workload = _load(args)
    seconds = time.perf_counter() - started
    stats = workload_stats(workload)
    if args.json:
        json.dump({**stats.to_dict(), "load_seconds": seconds}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_stats(stats, Console())
        print(f"loaded in {seconds:.2f} s")
    return 0
