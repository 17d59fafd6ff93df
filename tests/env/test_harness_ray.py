"""Episodes on a real local Ray cluster: scripted agents over the demo tasks in the real sandbox,
each model call to the real vLLM-CPU replica (the tiny model), results streamed back to the
driver; a worker killed mid-run; the policy version moved mid-run."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import ray

from kvharness.cli import main
from kvharness.env.api import EnvConfig
from kvharness.env.harness.client import ChatClient
from kvharness.env.harness.demo import make_demo_suite
from kvharness.env.harness.episode import EpisodeResult
from kvharness.env.harness.loop import run_episodes
from kvharness.env.harness.ray_runner import ClientSpec, RayRunner
from kvharness.env.harness.record import read_rollouts
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.env.task import Task
from kvharness.testing import VllmReplica
from kvharness.workload.format import load

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture
def config(env_venv: Path) -> EnvConfig:
    return EnvConfig(
        max_steps=20,
        max_submissions=3,
        limits=Limits(timeout_s=60),
        python_env=python_env_paths(env_venv),
    )


@pytest.fixture
def tasks(tmp_path: Path) -> list[Task]:
    return make_demo_suite(tmp_path / "suite", ("add", "clamp", "mean"))


def _spec(replica: VllmReplica) -> ClientSpec:
    return ClientSpec(replica.url, replica.model, max_tokens=8)


def _outcome(episodes: Sequence[EpisodeResult]) -> list[tuple[Any, ...]]:
    return [
        (
            ep.episode,
            ep.error,
            ep.reward,
            [s.score for s in ep.submissions],
            [r.tool for r in ep.tool_runs],
            len(ep.calls),
        )
        for ep in episodes
    ]


async def test_two_workers_match_the_local_runner_and_stream_results(
    ray_cluster: str,
    vllm_replicas: Sequence[VllmReplica],
    tasks: list[Task],
    config: EnvConfig,
) -> None:
    replica = vllm_replicas[0]
    async with ChatClient(replica.url, replica.model, max_tokens=8) as client:
        local = await run_episodes(tasks, "oracle", client, config, concurrency=2, repeats=2)
    arrivals: list[tuple[float, str]] = []
    with RayRunner(_spec(replica), config, workers=2, per_worker=1, address=ray_cluster) as runner:
        pids = set(ray.get([w.pid.remote() for w in runner.workers]))
        on_ray = await asyncio.to_thread(
            runner.run,
            tasks,
            "oracle",
            repeats=2,
            on_done=lambda ep: arrivals.append((time.time(), ep.episode)),
        )
        origin = runner.origin
    assert _outcome(on_ray) == _outcome(local)
    assert all(ep.reward == 1.0 for ep in on_ray)
    assert len(pids) == 2
    assert sorted(e for _, e in arrivals) == sorted(ep.episode for ep in on_ray)
    # Streamed: six episodes, one at a time on each of two workers, so the first result reached
    # the driver before the last episode to finish had even sent its first call.
    last = max(on_ray, key=lambda ep: ep.calls[-1].call.done)
    assert last.start is not None
    assert arrivals[0][0] < origin + last.start


def test_env_run_with_ray_writes_the_rollouts(
    ray_cluster: str, vllm_replicas: Sequence[VllmReplica], tasks: list[Task], tmp_path: Path
) -> None:
    replica = vllm_replicas[0]
    out = tmp_path / "out"
    argv = ["env", "run", "--backend", replica.url, "--tasks", str(tasks[0].root.parent),
            "--agent", "oracle", "--tokenizer", "approx", "--max-tokens", "8",
            "--concurrency", "2", "--ray", ray_cluster, "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rollouts = read_rollouts(out / "rollouts.jsonl")
    assert sorted(ep.episode for ep in rollouts) == [f"{t.id}/0" for t in tasks]
    assert all(ep.reward == 1.0 and ep.error is None for ep in rollouts)
    assert json.loads((out / "config.json").read_text())["ray"] == ray_cluster
    assert len(load(out / "workload.jsonl").sessions) == len(tasks)
