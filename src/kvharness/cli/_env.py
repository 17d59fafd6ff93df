"""`kvharness env`: coding-agent RL environments.

``kvharness env run --backend URL --tasks SUITE --out DIR``: run agent episodes over a suite
against an OpenAI-compatible server and write ``DIR/workload.jsonl`` (the model calls as a
kvharness workload, for ``workload stats``, ``sim`` and ``bench``), ``DIR/rollouts.jsonl`` (full
trajectories, rewards, submissions, timings; appended as episodes finish) and ``DIR/config.json``
(the resolved options).

``kvharness env run --resume DIR``: continue an interrupted run with the options in
``DIR/config.json`` (``--backend`` may point it elsewhere): the episodes already in
``DIR/rollouts.jsonl`` are kept (a torn last line is cut off), the others are run and appended,
and ``DIR/workload.jsonl`` is written for them all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from kvharness.cli._args import (
    block_size,
    bounded,
    non_negative_int,
    output_dir,
    positive_float,
    positive_int,
)
from kvharness.errors import UserError

HELP = "coding-agent RL environments: run agents over a task suite and record the rollouts"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("env", help=HELP, description=HELP)
    sub = parser.add_subparsers(dest="env_command", metavar="ENV_COMMAND")
    parser.set_defaults(func=lambda args: _no_sub(parser))
    _register_build(sub)
    _register_run(sub)


def _no_sub(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _register_build(sub: Any) -> None:
    try:
        from kvharness.env.tasks import cli as tasks_cli
    except ImportError:  # the suite builder is not part of this installation
        return
    p = sub.add_parser(
        "build-suite",
        help="build a task suite (real packages, injected bugs, hidden tests) from pinned sdists",
        description="Build a task suite from pinned package versions: unpack each sdist, inject "
        "bugs by AST mutation, keep those that fail some of the package's own tests.",
    )
    tasks_cli.add_build_arguments(p)
    p.set_defaults(func=_run_build)
    verify = getattr(tasks_cli, "add_verify_arguments", None)
    if verify is not None:
        v = sub.add_parser(
            "verify-suite",
            help="check every task of a built suite: the mutant fails FAIL_TO_PASS, the fix "
            "passes everything",
        )
        verify(v)
        v.set_defaults(func=tasks_cli.run_verify)


def _run_build(args: argparse.Namespace) -> int:
    from kvharness.env.tasks import cli as tasks_cli

    output_dir(args.out, "--out")
    return tasks_cli.run_build(args)


def _register_run(sub: Any) -> None:
    from kvharness.env.harness.agents import AGENTS

    p = sub.add_parser(
        "run",
        help="run agent episodes over a task suite against a chat server; record the rollouts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--backend",
        "--endpoint",
        dest="backend",
        metavar="URL",
        help="OpenAI-compatible server's base URL (http://host:port); required unless --resume",
    )
    p.add_argument(
        "--tasks",
        type=Path,
        help="task suite folder (or one task folder); required unless --resume",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="output folder (created; must not hold a run); required unless --resume",
    )
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the run in DIR with its own options (config.json): keep its recorded "
        "episodes, run the others",
    )
    p.add_argument(
        "--agent",
        default="model",
        choices=sorted(AGENTS),
        help="who acts: the model's tool calls (model; the server must parse tool calls, e.g. "
        "vLLM with --enable-auto-tool-choice --tool-call-parser NAME), or a script that still "
        "calls the model every turn with the whole history: oracle (known fix after a wrong "
        "attempt), noop (submits at once), cheat (attacks the test files) (default: model)",
    )
    p.add_argument("--only", default=None, help="comma-separated task ids to run (default: all)")
    p.add_argument(
        "--limit", type=non_negative_int, default=None, help="run only the first N tasks"
    )
    p.add_argument("--repeats", type=positive_int, default=1, help="episodes per task (default: 1)")
    p.add_argument(
        "--concurrency", type=positive_int, default=4, help="episodes in flight (default: 4)"
    )
    p.add_argument("--model", default=None, help="model name (default: the backend's first)")
    p.add_argument("--api-key", default=None, help="bearer token for the backend")
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=256,
        help="completion tokens per call (default: 256)",
    )
    p.add_argument(
        "--temperature",
        type=bounded(float, 0.0, 2.0),
        default=0.0,
        help="sampling temperature, 0 to 2 (default 0)",
    )
    p.add_argument(
        "--max-steps",
        type=bounded(int, 1, 10_000),
        default=30,
        help="actions per episode (default: 30)",
    )
    p.add_argument(
        "--max-submissions",
        type=bounded(int, 1, 10_000),
        default=3,
        help="graded submits per episode (default: 3)",
    )
    p.add_argument(
        "--reward",
        default="best",
        help="episode reward over submissions: best, last, discounted[:F[/step|/second]], "
        "with optional ',cost=X' per extra submission (default: best)",
    )
    p.add_argument(
        "--command-timeout",
        type=positive_float,
        default=60.0,
        help="wall seconds per command (default 60)",
    )
    p.add_argument(
        "--tokenizer",
        default="auto",
        help="how the workload's prompts are tokenised: 'server' (the backend's own /tokenize, "
        "as vLLM serves it: the exact prompt the engine saw), a tokenizer.json or its folder, "
        "'approx' (built-in approximation), or 'auto' (server when the backend has /tokenize, "
        "else approx; the default)",
    )
    p.add_argument(
        "--block-size", type=block_size, default=128, help="block size of the workload's chains"
    )
    p.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run commands directly on the host when bubblewrap is missing (no isolation!)",
    )
    p.set_defaults(func=run)


def _load_tasks(args: argparse.Namespace) -> list[Any]:
    from kvharness.env.task import load_suite, load_task

    root: Path = args.tasks
    tasks = [load_task(root)] if (root / "task.json").exists() else load_suite(root)
    if args.only:
        wanted = [t.strip() for t in args.only.split(",") if t.strip()]
        known = {t.id for t in tasks}
        missing = [w for w in wanted if w not in known]
        if missing:
            raise UserError(f"no task {', '.join(missing)} in {root}")
        tasks = [t for t in tasks if t.id in wanted]
    if args.limit is not None:
        tasks = tasks[: max(0, args.limit)]
    if not tasks:
        raise UserError(f"{root}: no tasks to run")
    return tasks


ROLLOUTS = "rollouts.jsonl"


def _resumed(args: argparse.Namespace) -> argparse.Namespace:
    """The options a run in ``args.resume`` was started with (``--backend`` may override); a
    config.json from before ``--endpoint`` was renamed has ``endpoint`` for ``backend``."""
    root: Path = args.resume
    if args.out is not None:
        raise UserError(
            f"--resume {root} continues that run in its own folder; drop --out {args.out} (or "
            "drop --resume to start a new run there)"
        )
    path = root / "config.json"
    if not path.is_file() or not (root / ROLLOUTS).is_file():
        raise UserError(f"{root} is not an env run folder (no config.json and {ROLLOUTS})")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not a JSON object ({err})") from None
    if isinstance(saved, dict) and "backend" not in saved and "endpoint" in saved:
        saved["backend"] = saved.pop("endpoint")
    if not isinstance(saved, dict) or not {"backend", "tasks"} <= saved.keys():
        raise UserError(f"{path}: not the config of an env run (no backend and tasks)")
    merged = {**vars(args), **{k: v for k, v in saved.items() if k in vars(args)}}
    merged.update(out=root, resume=root, tasks=Path(saved["tasks"]))
    if args.backend is not None:
        merged["backend"] = args.backend
    return argparse.Namespace(**merged)


def _check_new(args: argparse.Namespace) -> None:
    missing = [f"--{n}" for n in ("backend", "tasks", "out") if getattr(args, n) is None]
    if missing:
        raise UserError(f"give {', '.join(missing)} (or --resume DIR to continue a run)")
    output_dir(args.out, "--out")
    if (args.out / ROLLOUTS).exists():
        raise UserError(
            f"{args.out} already holds a run; pick another --out or continue it with "
            f"--resume {args.out}"
        )


def run(args: argparse.Namespace) -> int:
    from kvharness.env.api import EnvConfig
    from kvharness.env.harness.client import ChatClient, ModelError
    from kvharness.env.harness.loop import EpisodeResult, run_episodes
    from kvharness.env.harness.record import read_rollouts, rollout_line, to_workload
    from kvharness.env.reward import parse_rule
    from kvharness.env.sandbox import Limits
    from kvharness.files import replacing
    from kvharness.jsonl import open_append
    from kvharness.workload.format import save
    from kvharness.workload.tokenize import load_tokenizer

    if args.resume is not None:
        args = _resumed(args)
    else:
        _check_new(args)
    try:
        rule = parse_rule(args.reward)
    except ValueError as err:
        raise UserError(str(err)) from None
    tasks = _load_tasks(args)
    mode = args.tokenizer
    tokenizer = None
    if mode not in ("auto", "server"):
        tokenizer = load_tokenizer(None if mode == "approx" else mode)
    limits = Limits(timeout_s=args.command_timeout, cpu_s=max(1, int(args.command_timeout)))
    config = EnvConfig(
        max_steps=args.max_steps,
        max_submissions=args.max_submissions,
        reward=rule,
        limits=limits,
        unsafe=args.unsafe_no_sandbox,
    )
    out: Path = args.out
    if args.resume is None:
        out.mkdir(parents=True, exist_ok=True)
        resolved = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        resolved.pop("func", None)
        resolved["tasks_run"] = [t.id for t in tasks]
        with replacing(out / "config.json") as tmp:
            tmp.write_text(json.dumps(resolved, indent=2) + "\n")

    rollouts = open_append(out / ROLLOUTS)
    previous = read_rollouts(out / ROLLOUTS) if args.resume is not None else []
    origin = max((c.call.done for ep in previous for c in ep.calls), default=0.0)

    def on_done(ep: EpisodeResult) -> None:
        rollouts.write(rollout_line(ep).encode() + b"\n")
        rollouts.flush()

    async def go() -> tuple[list[EpisodeResult], float, list[list[list[int]]] | None]:
        async with ChatClient(
            args.backend,
            args.model,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            api_key=args.api_key,
        ) as client:
            try:
                await client.resolve_model()
            except ModelError as err:
                raise UserError(str(err)) from None
            start = time.perf_counter()
            fresh = await run_episodes(
                tasks,
                args.agent,
                client,
                config,
                concurrency=args.concurrency,
                repeats=args.repeats,
                on_done=on_done,
                skip={ep.episode for ep in previous},
                origin=origin,
            )
            wall = time.perf_counter() - start
            episodes = _in_task_order(previous + fresh, tasks)
            ids = None
            if tokenizer is None:
                ids = await _server_prompt_ids(client, episodes, required=mode == "server")
            return episodes, wall, ids

    try:
        episodes, wall, prompt_ids = asyncio.run(go())
    finally:
        rollouts.close()
    if tokenizer is None and prompt_ids is None:
        print("the backend has no /tokenize: prompts tokenised approximately", file=sys.stderr)
        tokenizer = load_tokenizer(None)
    workload = to_workload(
        episodes,
        tokenizer,
        block_size=args.block_size,
        name=f"env-{args.agent}",
        meta={"agent": args.agent, "backend": args.backend, "suite": str(args.tasks)},
        prompt_ids=prompt_ids,
    )
    save(workload, out / "workload.jsonl")
    _print_summary(episodes, wall, out)
    return 0 if all(ep.error is None for ep in episodes) else 1


def _in_task_order(episodes: list[Any], tasks: list[Any]) -> list[Any]:
    """Episodes sorted as the run lists them: by task, then repeat number."""
    rank = {t.id: i for i, t in enumerate(tasks)}

    def key(ep: Any) -> tuple[int, int]:
        repeat = ep.episode.rpartition("/")[2]
        return rank.get(ep.task_id, len(rank)), int(repeat) if repeat.isdigit() else 0

    return sorted(episodes, key=key)


async def _server_prompt_ids(
    client: Any, episodes: list[Any], *, required: bool
) -> list[list[list[int]]] | None:
    """The server's token ids of every call's prompt (None when it has no /tokenize and it was
    not ``required``)."""
    from kvharness.env.actions import TOOL_SCHEMAS
    from kvharness.env.harness.client import ModelError
    from kvharness.env.harness.record import call_prompts

    out: list[list[list[int]]] = []
    try:
        for ep in episodes:
            out.append([await client.tokenize(p, TOOL_SCHEMAS) for p in call_prompts(ep)])
    except ModelError as err:
        if required:
            raise UserError(f"--tokenizer server: {err}") from None
        return None
    return out


def _print_summary(episodes: list[Any], wall: float, out: Path) -> None:
    calls = [c.call for ep in episodes for c in ep.calls]
    prompt = sum(c.prompt_tokens for c in calls)
    cached = sum(c.cached_tokens or 0 for c in calls)
    mean = sum(ep.reward for ep in episodes) / len(episodes)
    print(f"{'episode':<40} {'reward':>7} {'steps':>6} {'calls':>6}  submissions")
    for ep in episodes:
        subs = " ".join(f"{s.score:.2f}" for s in ep.submissions) or "-"
        note = f"  ERROR {ep.error}" if ep.error else ""
        print(f"{ep.episode:<40} {ep.reward:7.3f} {ep.steps:6d} {len(ep.calls):6d}  {subs}{note}")
    print(
        f"{len(episodes)} episodes in {wall:.1f} s ({len(episodes) / wall:.3f} episodes/s); "
        f"mean reward {mean:.3f}; {len(calls)} model calls, {prompt} prompt tokens, "
        f"{cached} cached ({(cached / prompt if prompt else 0):.1%})"
    )
    print(f"wrote {out / 'workload.jsonl'}, {out / 'rollouts.jsonl'}", file=sys.stderr)
