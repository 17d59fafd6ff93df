"""Computer-use rollouts against the tiny VLM on a real vLLM-CPU engine: the model is called with
real screenshots before every action, the rollouts become a multimodal workload whose prompts are
exactly what the engine saw, and ``kvharness bench`` replays them with the same prompt tokens."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from kvharness.cli import main
from kvharness.env.adapters.verifiers_web import VerifiersWebEnv
from kvharness.env.harness.client import ChatClient
from kvharness.env.web.apps import task as web_task
from kvharness.env.web.env import WebConfig
from kvharness.env.web.harness import DROPPED, episode_session, run_episode
from kvharness.report.records import read_records
from kvharness.testing import VllmReplica
from kvharness.testing.tiny_vlm import SERVED_NAME, image_tokens
from kvharness.workload.format import load

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

W, H = 640, 400


def test_model_rollouts_record_and_replay(
    vlm_replica: VllmReplica, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = [
        "env", "web", "run", "--backend", vlm_replica.url, "--families", "signup-form,cart",
        "--seeds", "0", "--width", str(W), "--height", str(H), "--max-steps", "4",
        "--max-tokens", "6", "--out", str(out),
    ]  # fmt: skip
    for agent in ("model", "oracle"):
        assert main([*args[:-1], str(out / agent), "--agent", agent]) == 0
    printed = capsys.readouterr().out
    assert "2 episodes: mean reward" in printed and "episodes/min" in printed
    for agent in ("model", "oracle"):
        run = out / agent
        episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
        summary = json.loads((run / "summary.json").read_text())
        assert summary["episodes"] == 2 and summary["step_s_p90"] >= summary["step_s_p50"] > 0
        workload = load(run / "workload.jsonl")
        assert workload.num_turns == 8 and workload.has_images
        for ep in episodes:
            assert len(ep["steps"]) == 4
        for session in workload.sessions:
            # One screenshot per step so far, each the tiny VLM's processor's token count.
            assert [len(t.images) for t in session.turns] == [1, 2, 3, 4]
            assert all(im.tokens == image_tokens(W, H) for t in session.turns for im in t.images)
        if agent == "model":
            # The random-weight model writes no valid action: each step says what to write.
            assert all(s["error"] and "no action found" in s["error"]
                       for ep in episodes for s in ep["steps"])  # fmt: skip
        else:
            assert episodes[0]["reward"] > 0
        bench = tmp_path / f"bench-{agent}"
        assert main(["bench", "--backend", vlm_replica.url, "--workload", str(run / "workload.jsonl"),
                     "--out", str(bench), "--no-progress"]) == 0  # fmt: skip
        replayed = {
            (r.session, r.turn): r.prompt_tokens for r in read_records(bench / "records.jsonl")
        }
        recorded = {
            (s.id, k): t.input.num_tokens for s in workload.sessions for k, t in enumerate(s.turns)
        }
        assert replayed == recorded  # fmt: skip
        sim = tmp_path / f"sim-{agent}"
        assert main(["sim", "--workload", str(run / "workload.jsonl"), "--cluster",
                     "1xH200:qwen2.5-vl-7b", "--policy", "round_robin", "--executor", "serial",
                     "--out", str(sim)]) == 0  # fmt: skip
        assert json.loads((sim / "sim.json").read_text())
    capsys.readouterr()


async def test_keep_last_screens_rewrites_the_prompt(vlm_replica: VllmReplica) -> None:
    async with ChatClient(vlm_replica.url, max_tokens=4) as client:
        ep, calls = await run_episode(
            web_task("signup-form/1"), "oracle", client, WebConfig(width=W, height=H, max_steps=5),
            keep_screens=2,
        )  # fmt: skip
        assert [len(c.images) for c in calls] == [1, 2, 2, 2, 2]
        assert DROPPED in json.dumps(calls[-1].messages)
        session = await episode_session(ep, calls, client, 16)
    assert session is not None
    # Not append-only: the turns carry images (sizes, hashes), not messages.
    assert all(t.messages is None for t in session.turns)
    assert [t.input.num_tokens for t in session.turns] == [c.call.prompt_tokens for c in calls]
    # Dropping the oldest screenshot ends the cached prefix at its first block.
    third, fourth = session.turns[2], session.turns[3]
    assert third.images[1].hash == fourth.images[0].hash
    shared = next(i for i, (a, b) in enumerate(zip(third.input.hashes, fourth.input.hashes,
                                                   strict=False)) if a != b)  # fmt: skip
    assert shared * 16 <= third.images[0].offset + 16


async def test_verifiers_rollout_with_an_openai_client(vlm_replica: VllmReplica) -> None:
    env = VerifiersWebEnv([web_task("todo-list/2")], WebConfig(width=W, height=H, max_steps=3))
    row = env.dataset[0]
    client = openai.AsyncOpenAI(base_url=vlm_replica.url + "/v1", api_key="none")
    try:
        completion, state = await env.rollout(
            client, SERVED_NAME, row["prompt"], info=row["info"], sampling_args={"max_tokens": 4}
        )
    finally:
        await client.close()
    assert state["turn"] == 3 and "web_env" not in state
    roles = [m["role"] for m in completion]
    assert roles == ["assistant", "user"] * 3
    assert completion[1]["content"][1]["type"] == "image_url"
    scored = await env.rubric.score_rollout(row["prompt"], completion, "", state)
    assert scored["reward"] == 0.0 and "web_env" not in env.dumps_state(state)
