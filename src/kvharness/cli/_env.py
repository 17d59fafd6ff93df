"""`kvharness env`: coding-agent RL environments.

``kvharness env run --backend URL --tasks SUITE --out DIR``: run agent episodes over a suite
against an OpenAI-compatible server and write ``DIR/workload.jsonl`` (the model calls as a
kvharness workload, for ``workload stats``, ``sim`` and ``bench``), ``DIR/rollouts.jsonl`` (full
trajectories, rewards, submissions, timings; appended as episodes finish) and ``DIR/config.json``
(the resolved options). ``--agent mini-swe-agent`` runs that harness (PyPI mini-swe-agent, in
``.venv-mini-swe-agent``: ``make mini-swe-agent``) and leaves its own trajectory files in
``DIR/trajectories/<task>/<k>.traj.json``.

While it runs, each unfinished episode keeps a checkpoint in ``DIR/checkpoints/<task>/<k>``
(:mod:`kvharness.env.harness.checkpoint`), written every ``--checkpoint-steps`` steps or
``--checkpoint-s`` seconds and removed once the episode is recorded.

``kvharness env run --resume DIR``: continue an interrupted run (the runner killed, the machine
rebooted, the engine restarted under it) with the options in ``DIR/config.json`` (``--backend``
may point it elsewhere): the episodes already in ``DIR/rollouts.jsonl`` are kept (a torn last
line is cut off) but those a model failure ended, the others are run and appended, each from its
checkpoint when it has one, and ``DIR/workload.jsonl`` is written for them all.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from kvharness.cli._args import output_dir
from kvharness.cli._config_args import add_options, config_from_args
from kvharness.configs import to_json_dict
from kvharness.errors import UserError

HELP = "coding-agent RL environments: run agents over a task suite and record the rollouts"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("env", help=HELP, description=HELP)
    sub = parser.add_subparsers(dest="env_command", metavar="ENV_COMMAND")
    parser.set_defaults(func=lambda args: _no_sub(parser))
    _register_build(sub)
    _register_perf_build(sub)
    _register_run(sub)
    from kvharness.cli import _web

    _web.register(sub)


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


def _register_perf_build(sub: Any) -> None:
    p = sub.add_parser(
        "build-perf-suite",
        help="build the performance-engineering suite: make a slow, correct function faster",
        description="Write the bundled performance tasks as a suite for `kvharness env run`: "
        "each holds a slow but correct reference (the agent's solution.py), hidden seeded "
        "correctness cases and a speed reward measured against the reference in fresh "
        "processes. --verify then grades each task's oracle (must score 1), its unchanged "
        "reference (must score 0) and a correct but slower solution (partial credit).",
    )
    p.add_argument("--out", type=Path, required=True, help="suite folder to write (created)")
    p.add_argument(
        "--torch-venv",
        type=Path,
        default=None,
        metavar="DIR",
        help="a Python environment with torch and triton for the Triton tasks (.venv-vllm has "
        "both); without it they are left out",
    )
    p.add_argument(
        "--only", default=None, metavar="IDS", help="comma-separated task ids (default: all)"
    )
    p.add_argument(
        "--verify", action="store_true", help="grade oracle, reference and slower solution"
    )
    p.set_defaults(func=_run_perf_build)


def _run_perf_build(args: argparse.Namespace) -> int:
    from kvharness.env.perf.suite import build_perf_suite
    from kvharness.env.perf.verify import verify_perf_task

    output_dir(args.out, "--out")
    only = [t.strip() for t in args.only.split(",") if t.strip()] if args.only else None
    tasks, skipped = build_perf_suite(args.out, torch_venv=args.torch_venv, only=only)
    left = f"; left out (no --torch-venv): {', '.join(skipped)}" if skipped else ""
    print(f"{len(tasks)} performance tasks in {args.out}{left}")
    if not args.verify:
        return 0
    failed = 0
    for task in tasks:
        check = verify_perf_task(task)
        failed += not check.ok
        o, r, s = check.oracle, check.reference, check.slower
        speed = "" if o.speedup is None else f" (oracle {o.speedup.estimate:.1f}x"
        speed += "" if s.speedup is None else f", slower {s.speedup.estimate:.1f}x)"
        status = "ok" if check.ok else "FAIL " + "; ".join(check.problems)
        print(
            f"{task.id}: {status}: oracle {o.score:.2f}, reference {r.score:.2f}, slower "
            f"{s.score:.2f}{speed}",
            flush=True,
        )
    print(f"{len(tasks) - failed}/{len(tasks)} tasks verified")
    return 1 if failed else 0


def _run_build(args: argparse.Namespace) -> int:
    from kvharness.env.tasks import cli as tasks_cli

    output_dir(args.out, "--out")
    return tasks_cli.run_build(args)


def _register_run(sub: Any) -> None:
    from kvharness.env.harness.agents import AGENTS
    from kvharness.env.harness.config import RunConfig

    p = sub.add_parser(
        "run",
        help="run agent episodes over a task suite against a chat server; record the rollouts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from kvharness.env.harness.context import COMPACTIONS
    from kvharness.env.harness.episode import MINI_SWE_AGENT

    add_options(
        p,
        RunConfig,
        overrides={
            "agent": {"choices": sorted([*AGENTS, MINI_SWE_AGENT])},
            "compaction": {"choices": COMPACTIONS},
        },
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
        "episodes, run the others, each from its last checkpoint when it has one (an episode "
        "a model failure ended is run again from its checkpoint)",
    )
    p.set_defaults(func=run)


def _load_tasks(cfg: Any) -> list[Any]:
    from kvharness.env.task import load_suite, load_task

    root: Path = cfg.tasks
    tasks = [load_task(root)] if (root / "task.json").exists() else load_suite(root)
    if cfg.only:
        wanted = [t.strip() for t in cfg.only.split(",") if t.strip()]
        known = {t.id for t in tasks}
        missing = [w for w in wanted if w not in known]
        if missing:
            raise UserError(f"no task {', '.join(missing)} in {root}")
        tasks = [t for t in tasks if t.id in wanted]
    if cfg.limit is not None:
        tasks = tasks[: cfg.limit]
    if not tasks:
        raise UserError(f"{root}: no tasks to run")
    return tasks


ROLLOUTS = "rollouts.jsonl"
CHECKPOINTS = "checkpoints"
"""Where a run keeps its unfinished episodes' checkpoints: ``<task>/<k>/checkpoint.tar``."""
TRAJECTORIES = "trajectories"
"""Where ``--agent mini-swe-agent`` leaves its own trajectory files: ``<task>/<k>.traj.json``."""


def _resumed(args: argparse.Namespace) -> Any:
    """The configuration a run in ``args.resume`` was started with (``--backend`` may point it
    elsewhere; an API key it used is not saved and must be given again)."""
    from kvharness.configs import SECRET_SET, from_json
    from kvharness.env.harness.config import RunConfig

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
        cfg = from_json(RunConfig, path.read_bytes())
    except msgspec.DecodeError as err:
        raise UserError(f"{path}: not the config of an env run ({err})") from None
    if cfg.backend is None or cfg.tasks is None:
        raise UserError(f"{path}: not the config of an env run (no backend and tasks)")
    if args.backend is not None:
        cfg = dataclasses.replace(cfg, backend=args.backend)
    if args.api_key is not None:
        cfg = dataclasses.replace(cfg, api_key=args.api_key)
    elif cfg.api_key == SECRET_SET:
        raise UserError(f"the run in {root} used an API key, which is not saved: give --api-key")
    return cfg


def _check_new(args: argparse.Namespace) -> Any:
    from kvharness.env.harness.config import RunConfig

    missing = [f"--{n}" for n in ("backend", "tasks", "out") if getattr(args, n) is None]
    if missing:
        raise UserError(f"give {', '.join(missing)} (or --resume DIR to continue a run)")
    output_dir(args.out, "--out")
    if (args.out / ROLLOUTS).exists():
        raise UserError(
            f"{args.out} already holds a run; pick another --out or continue it with "
            f"--resume {args.out}"
        )
    return config_from_args(RunConfig, args)


def run(args: argparse.Namespace) -> int:
    from kvharness.env.api import EnvConfig
    from kvharness.env.harness.checkpoint import CheckpointPlan
    from kvharness.env.harness.client import ChatClient, ModelError
    from kvharness.env.harness.episode import MINI_SWE_AGENT, EpisodeResult
    from kvharness.env.harness.loop import keeps_checkpoint, run_episodes
    from kvharness.env.harness.mini_swe_agent import mini_python
    from kvharness.env.harness.record import read_rollouts, rollout_line, to_workload
    from kvharness.env.reward import parse_rule
    from kvharness.env.sandbox import Limits
    from kvharness.files import replacing
    from kvharness.jsonl import open_append
    from kvharness.workload.format import save
    from kvharness.workload.tokenize import load_tokenizer

    cfg = _resumed(args) if args.resume is not None else _check_new(args)
    if cfg.agent == MINI_SWE_AGENT:
        mini_python()  # its own environment, or a UserError saying how to build it
    try:
        rule = parse_rule(cfg.reward)
    except ValueError as err:
        raise UserError(str(err)) from None
    tasks = _load_tasks(cfg)
    mode = cfg.tokenizer
    tokenizer = None
    if mode not in ("auto", "server"):
        tokenizer = load_tokenizer(None if mode == "approx" else mode)
    timeout = cfg.command_timeout_s
    limits = Limits(timeout_s=timeout, cpu_s=max(1, int(timeout)))
    config = EnvConfig(
        max_steps=cfg.max_steps,
        max_submissions=cfg.max_submissions,
        reward=rule,
        limits=limits,
        unsafe=cfg.unsafe_no_sandbox,
    )
    out: Path = args.resume if args.resume is not None else args.out
    if args.resume is None:
        out.mkdir(parents=True, exist_ok=True)
        saved = dataclasses.replace(cfg, tasks_run=tuple(t.id for t in tasks))
        with replacing(out / "config.json") as tmp:
            tmp.write_bytes(
                msgspec.json.format(msgspec.json.encode(to_json_dict(saved)), indent=2) + b"\n"
            )

    rollouts = open_append(out / ROLLOUTS)
    recorded = read_rollouts(out / ROLLOUTS) if args.resume is not None else []
    origin = max((c.call.done for ep in recorded for c in ep.calls), default=0.0)
    previous = [ep for ep in recorded if not keeps_checkpoint(ep)]
    plan = CheckpointPlan(out / CHECKPOINTS, cfg.checkpoint_steps, cfg.checkpoint_s)
    for ep in previous:  # recorded, but its checkpoint outlived it (killed in between)
        plan.for_episode(ep.episode).clear()
    try:
        context = cfg.context()
    except ValueError as err:
        raise UserError(str(err)) from None

    def on_done(ep: EpisodeResult) -> None:
        rollouts.write(rollout_line(ep).encode() + b"\n")
        rollouts.flush()

    async def go() -> tuple[list[EpisodeResult], float, list[list[list[int]]] | None, str]:
        async with ChatClient(
            cfg.backend,
            cfg.model,
            max_tokens=cfg.max_tokens,
            temperature=cfg.temperature,
            api_key=cfg.api_key,
        ) as client:
            try:
                model = await client.resolve_model()
            except ModelError as err:
                raise UserError(str(err)) from None
            start = time.perf_counter()
            skip = {ep.episode for ep in previous}
            if cfg.ray is not None:
                fresh = await asyncio.to_thread(
                    _run_on_ray,
                    cfg,
                    model,
                    tasks,
                    config,
                    out,
                    skip,
                    origin,
                    on_done,
                    plan,
                    context,
                )
            else:
                fresh = await run_episodes(
                    tasks,
                    cfg.agent,
                    client,
                    config,
                    concurrency=cfg.concurrency,
                    repeats=cfg.repeats,
                    on_done=on_done,
                    skip=skip,
                    origin=origin,
                    trajectories=out / TRAJECTORIES,
                    context=context,
                    checkpoints=plan,
                )
            wall = time.perf_counter() - start
            episodes = _in_task_order(previous + fresh, tasks)
            ids = None
            if tokenizer is None:
                ids = await _server_prompt_ids(
                    client, episodes, required=mode == "server", agent=cfg.agent
                )
            return episodes, wall, ids, model

    try:
        episodes, wall, prompt_ids, model = asyncio.run(go())
    finally:
        rollouts.close()
        plan.prune()
    if tokenizer is None and prompt_ids is None:
        print("the backend has no /tokenize: prompts tokenised approximately", file=sys.stderr)
        tokenizer = load_tokenizer(None)
    workload = to_workload(
        episodes,
        tokenizer,
        block_size=cfg.block_size,
        name=f"env-{cfg.agent}",
        meta={"agent": cfg.agent, "backend": cfg.backend, "suite": str(cfg.tasks)},
        prompt_ids=prompt_ids,
    )
    save(workload, out / "workload.jsonl")
    _print_summary(episodes, wall, out)
    _write_harness(episodes, wall, out, cfg, model)
    return 0 if all(ep.error is None for ep in episodes) else 1


def _run_on_ray(
    cfg: Any,
    model: str,
    tasks: list[Any],
    config: Any,
    out: Path,
    skip: set[str],
    origin: float,
    on_done: Any,
    plan: Any,
    context: Any,
) -> list[Any]:
    """The episodes run on the Ray cluster ``cfg.ray`` (see :mod:`.ray_runner`), each written
    by ``on_done`` as it finishes, checkpointed as ``plan`` says, compacted as ``context``
    says."""
    from kvharness.env.harness import ray_runner as rr

    try:
        rr.connect(cfg.ray)
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'kvharness[ray]'") from None
    workers, per_worker = rr.workers_for(cfg.concurrency, rr.cluster_cpus())
    spec = rr.ClientSpec(
        cfg.backend,
        model,
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
        api_key=cfg.api_key,
    )
    with rr.RayRunner(
        spec,
        config,
        workers=workers,
        per_worker=per_worker,
        origin=origin,
        trajectories=out / TRAJECTORIES,
        checkpoints=plan,
        context=context,
    ) as runner:
        return runner.run(tasks, cfg.agent, repeats=cfg.repeats, skip=skip, on_done=on_done)


def _in_task_order(episodes: list[Any], tasks: list[Any]) -> list[Any]:
    """Episodes sorted as the run lists them: by task, then repeat number."""
    rank = {t.id: i for i, t in enumerate(tasks)}

    def key(ep: Any) -> tuple[int, int]:
        repeat = ep.episode.rpartition("/")[2]
        return rank.get(ep.task_id, len(rank)), int(repeat) if repeat.isdigit() else 0

    return sorted(episodes, key=key)


async def _server_prompt_ids(
    client: Any, episodes: list[Any], *, required: bool, agent: str
) -> list[list[list[int]]] | None:
    """The server's token ids of every call's prompt, with the tools ``agent`` sent (None when
    it has no /tokenize and it was not ``required``)."""
    from kvharness.env.actions import TOOL_SCHEMAS
    from kvharness.env.harness.client import ModelError
    from kvharness.env.harness.episode import MINI_SWE_AGENT
    from kvharness.env.harness.mini_swe_agent import MINI_TOOLS
    from kvharness.env.harness.record import call_prompts

    tools = MINI_TOOLS if agent == MINI_SWE_AGENT else TOOL_SCHEMAS
    out: list[list[list[int]]] = []
    try:
        for ep in episodes:
            out.append([await client.tokenize(p, tools) for p in call_prompts(ep)])
    except ModelError as err:
        if required:
            raise UserError(f"--tokenizer server: {err}") from None
        return None
    return out


def _write_harness(episodes: list[Any], wall: float, out: Path, cfg: Any, model: str) -> None:
    """The harness benchmark's table, printed and written (``harness.json``, ``harness.html``).
    A resumed run's wall time is that of its last part."""
    from rich.console import Console

    from kvharness.env.harness.summary import HARNESS_JSON, render_html, render_table, summarise
    from kvharness.files import replacing

    summary = summarise(
        episodes, wall_s=wall, replicas=_replicas(cfg.backend), label=f"{cfg.agent} / {model}",
        agent=cfg.agent, model=model, endpoint=cfg.backend,
    )  # fmt: skip
    with replacing(out / HARNESS_JSON) as tmp:
        tmp.write_bytes(msgspec.json.format(msgspec.json.encode(summary), indent=2) + b"\n")
    with replacing(out / "harness.html") as tmp:
        tmp.write_text(render_html([summary], f"harness benchmark: {out.name}"), encoding="utf-8")
    Console().print(render_table([summary]))


def _replicas(backend: str) -> int:
    """Replicas behind ``backend``: a kvharness gateway says at its ``/status``; any other
    server counts as one."""
    from kvharness.wire.blocking import get
    from kvharness.wire.http import WireError

    try:
        status, body = get(backend.rstrip("/") + "/status", timeout_s=5.0, limit=1 << 22)
        replicas = msgspec.json.decode(body).get("replicas") if status == 200 else None
    except (WireError, msgspec.DecodeError, AttributeError):
        return 1
    return len(replicas) if isinstance(replicas, list) and replicas else 1


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
