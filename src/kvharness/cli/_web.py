"""`kvharness env web`: the computer-use environment (a real browser, hidden checks).

``kvharness env web list``: the task families. ``kvharness env web run --agent oracle --out DIR``:
episodes over the suite (each family's variants for ``--seeds``), one sandboxed headless Chromium
per episode; with ``--backend URL`` a vision-language model is called before every action with the
screenshots, and the rollouts become ``DIR/workload.jsonl`` for ``kvharness bench`` and
``kvharness sim``. ``DIR/episodes.jsonl`` grows as episodes finish (``--resume DIR`` runs the
rest); ``DIR/summary.json`` holds the figures and ``DIR/config.json`` the options.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from kvharness.cli._config_args import add_options, config_from_args
from kvharness.configs import to_json_dict
from kvharness.errors import UserError

HELP = "computer-use environment: agents in a sandboxed browser, scored by hidden checks"


def register(sub: Any) -> None:
    parser = sub.add_parser("web", help=HELP, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    web = parser.add_subparsers(dest="web_command", metavar="WEB_COMMAND")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
    listing = web.add_parser("list", help="the task families", description="The task families.")
    listing.set_defaults(func=_list)
    from kvharness.env.web.agents import WEB_AGENTS
    from kvharness.env.web.run import WebRunConfig

    run = web.add_parser(
        "run", help="run an agent over the web task suite", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add_options(run, WebRunConfig, overrides={"agent": {"choices": list(WEB_AGENTS)}})
    run.add_argument("--out", type=Path, help="output folder (required unless --resume)")
    run.add_argument(
        "--resume", type=Path, metavar="DIR",
        help="continue the run in DIR with its options: run only the episodes it lacks",
    )  # fmt: skip
    run.set_defaults(func=_run)


def _list(args: argparse.Namespace) -> int:
    from kvharness.env.web.apps import FAMILIES

    for fam in FAMILIES.values():
        task = fam.build(0)
        print(f"{fam.name:22s} {len(task.milestones)} milestones  {fam.summary}")
    print(f"{len(FAMILIES)} families")
    return 0


def parse_seeds(text: str) -> list[int]:
    """``"0-4,9"`` -> ``[0, 1, 2, 3, 4, 9]``; UserError for anything else."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise UserError(f"--seeds: {part!r} is not a number or a range like 0-4")
        seeds += range(int(lo), int(hi or lo) + 1)
    if not seeds:
        raise UserError("--seeds: give at least one seed")
    return list(dict.fromkeys(seeds))


def _config(args: argparse.Namespace) -> tuple[Any, Path]:
    from kvharness.env.web.run import WebRunConfig

    if args.resume is not None:
        saved = args.resume / "config.json"
        if not saved.exists():
            raise UserError(f"--resume {args.resume}: no config.json there (not a web run folder)")
        fields = json.loads(saved.read_text())
        return WebRunConfig(**fields), args.resume
    if args.out is None:
        raise UserError("give --out DIR (or --resume DIR)")
    if (args.out / "episodes.jsonl").exists():
        raise UserError(f"{args.out} already holds a run: --resume it or choose another --out")
    cfg = config_from_args(WebRunConfig, args)
    if cfg.agent == "model" and cfg.backend is None:
        raise UserError("--agent model needs --backend URL (a vision-language model server)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "config.json").write_text(json.dumps(to_json_dict(cfg), indent=2) + "\n")
    return cfg, args.out


def _run(args: argparse.Namespace) -> int:
    from kvharness.env.web.apps import suite
    from kvharness.env.web.run import run_suite, summarise, write_workload

    cfg, out = _config(args)
    names = cfg.families.split(",") if cfg.families else None
    tasks = suite(parse_seeds(cfg.seeds), names)
    t0 = time.monotonic()

    def on_done(doc: dict[str, Any]) -> None:
        print(
            f"{doc['task']:26s} reward {doc['reward']:.2f}  {len(doc['steps']):3d} steps  "
            f"{doc['wall_s']:6.1f} s  {', '.join(doc['milestones']) or '-'}",
            flush=True,
        )

    episodes = asyncio.run(run_suite(tasks, cfg, out, on_done=on_done))
    summary = summarise(episodes, time.monotonic() - t0)
    summary["config"] = dataclasses.asdict(cfg)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    n = write_workload(episodes, cfg.block_size, out / "workload.jsonl")
    print(
        f"{summary['episodes']} episodes: mean reward {summary['mean_reward']:.3f}, "
        f"{summary['solved']} solved; step p50 {_ms(summary['step_s_p50'])} "
        f"p90 {_ms(summary['step_s_p90'])}; {summary['episodes_per_min'] or 0:.1f} episodes/min "
        f"at concurrency {cfg.concurrency}"
    )
    print(f"wrote {out / 'episodes.jsonl'}, {out / 'summary.json'}"
          + (f", {out / 'workload.jsonl'} ({n} sessions)" if n else ""))  # fmt: skip
    return 0


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.0f} ms"
