"""Multi-milestone (chain) tasks: a chain suite built from the pinned sdists, every task played
by the scripted agents in the real sandbox, and what the grading cache saves.

    .venv/bin/python benchmarks/chain_env.py [--suite DIR] [--spec chain] [--only IDS]

Builds the suite (``--spec``, default the nine-task ``chain``) under ``.cache/`` unless
``--suite`` names a built one, then prints, per task:

1. **rewards:** its milestones K; the oracle's submission scores (it restores the milestones in
   order and submits after each: 1/K, 2/K, ... 1); noop's reward (0); the halfway agent's (it
   stops after ceil(K/2) milestones: ceil(K/2)/K); and the **regression check**: milestones 1-3
   restored and submitted, then milestone 1 stubbed again and submitted: the second score must be
   0 and the episode's reward (rule ``best``) stay at 3/K;
2. **grading cost:** along the oracle's path, the tests each grading ran and its time, with the
   cache (only groups whose import closure changed) and without, side by side.

No model is called: the agents' scripts drive the environment directly.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kvharness.env.actions import EditFile, Submit
from kvharness.env.api import CodingEnv, EnvConfig
from kvharness.env.chain import CHAIN_SUITES, ChainGrader, ChainTask, build_chain_suite
from kvharness.env.harness.agents import play_script
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.env.task import load_suite
from kvharness.env.tasks import ensure_venv

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache"


def _play(task: ChainTask, agent: str, config: EnvConfig) -> tuple[list[float], float]:
    submissions, reward = play_script(task, agent, config)
    return [s.score for s in submissions], reward


def _regression(task: ChainTask, config: EnvConfig) -> tuple[float, float, float]:
    """(score with milestones 1-3, score once 1 is broken again, episode reward)."""
    m = task.milestones
    with CodingEnv(task, config) as env:
        env.reset()
        for ms in m[:3]:
            env.step(EditFile(ms.file, ms.stub, ms.original))
        env.step(Submit())
        env.step(EditFile(m[0].file, m[0].original, m[0].stub))
        env.step(Submit())
        first, second = (s.score for s in env.submissions)
        return first, second, env.episode_reward()


def _grading_path(task: ChainTask, env: tuple[Path, ...], cache: bool) -> tuple[list[int], float]:
    """Tests run by each grading along the oracle's path (milestones restored one by one), and
    the total grading time."""
    grader = ChainGrader(task, python_env=env, limits=Limits(timeout_s=300), cache=cache)
    with tempfile.TemporaryDirectory(prefix="kvh-chain-bench-") as tmp:
        repo = task.checkout(Path(tmp) / "repo")
        runs, start = [], time.perf_counter()
        for ms in task.milestones:
            ms.apply(repo)
            runs.append(grader.grade(repo).tests_run)
        return runs, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, default=None, help="a built chain suite")
    parser.add_argument("--spec", default="chain", choices=sorted(CHAIN_SUITES))
    parser.add_argument("--only", default="", help="comma-separated task ids")
    args = parser.parse_args()
    venv = ensure_venv(CACHE / "env-venv", CHAIN_SUITES[args.spec].test_deps)
    suite = args.suite
    if suite is None:
        suite = CACHE / "chain-bench" / args.spec
        if not (suite / "suite.json").exists():
            print(f"building the {args.spec} suite in {suite}...", file=sys.stderr)
            t0 = time.perf_counter()
            build_chain_suite(CHAIN_SUITES[args.spec], suite, venv=venv, cache=CACHE / "sdists")
            print(f"built in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    tasks = [t for t in load_suite(suite) if isinstance(t, ChainTask)]
    if args.only:
        wanted = set(args.only.split(","))
        tasks = [t for t in tasks if t.id in wanted]
    env = python_env_paths(venv)
    config = EnvConfig(max_steps=100, max_submissions=20, limits=Limits(timeout_s=300),
                       python_env=env)  # fmt: skip
    print(f"{len(tasks)} tasks, {sum(len(t.milestones) for t in tasks)} milestones\n")
    print("1. rewards")
    head = (
        f"{'task':<24} {'K':>2} {'oracle scores':<36} {'noop':>5} {'halfway':>8} {'regression':>16}"
    )
    print(head)
    ok = True
    for task in tasks:
        k = len(task.milestones)
        scores, oracle = _play(task, "oracle", config)
        _, noop = _play(task, "noop", config)
        _, half = _play(task, "halfway", config)
        first, broken, kept = _regression(task, config)
        shown = " ".join(f"{s:.2f}" for s in scores)
        good = (
            scores == [i / k for i in range(1, k + 1)]
            and oracle == 1.0
            and noop == 0.0
            and math.isclose(half, math.ceil(k / 2) / k)
            and math.isclose(first, 3 / k)
            and broken == 0.0
            and math.isclose(kept, 3 / k)
        )
        ok &= good
        regression = f"{first:.2f} -> {broken:.2f} ({kept:.2f})"
        flag = "" if good else "  UNEXPECTED"
        print(f"{task.id:<24} {k:>2} {shown:<36} {noop:5.2f} {half:8.2f} {regression:>16}{flag}")
    print("\n2. grading along the oracle's path: tests run per grading, total seconds")
    print(f"{'task':<24} {'cached':<28} {'s':>6}   {'uncached':<28} {'s':>6}")
    saved = []
    for task in tasks:
        with_cache, t_cache = _grading_path(task, env, True)
        without, t_plain = _grading_path(task, env, False)
        saved.append(1 - sum(with_cache) / sum(without))
        print(f"{task.id:<24} {' '.join(map(str, with_cache)):<28} {t_cache:6.1f}   "
              f"{' '.join(map(str, without)):<28} {t_plain:6.1f}")  # fmt: skip
    print(f"\ntests not run thanks to the cache: mean {statistics.fmean(saved):.0%} per task")
    print("every task as expected" if ok else "SOME TASKS NOT AS EXPECTED")


if __name__ == "__main__":
    main()
