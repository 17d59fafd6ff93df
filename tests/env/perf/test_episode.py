"""A performance task through the coding environments' episode API, agents and adapters."""

import json

import gymnasium

from kvharness.env.actions import EditFile, ReadFile, Submit
from kvharness.env.adapters.gym import ENV_ID
from kvharness.env.adapters.verifiers import VerifiersCodingEnv
from kvharness.env.api import AsyncCodingEnv, CodingEnv, EnvConfig
from kvharness.env.harness.agents import make_agent
from kvharness.env.perf.task import SYSTEM_PROMPT
from kvharness.env.task import load_suite, load_task, write_suite_index

from .conftest import FAST, SLOWER, write_task


def test_an_episode_scores_each_submission_as_it_comes(perf_task):
    with CodingEnv(perf_task, EnvConfig(max_submissions=3)) as env:
        obs, info = env.reset()
        assert "row_sq" in obs and "Budget:" in obs
        assert info["system_prompt"] == SYSTEM_PROMPT
        step = env.step(ReadFile("solution.py"))
        assert "def row_sq" in step.observation
        current = step.observation
        first = env.step(Submit())
        assert first.reward == 0.0 and first.info["score"] == 0.0
        assert (
            "Score: 0.000" in first.observation and "x the reference's speed" in first.observation
        )
        env.step(EditFile("solution.py", current, SLOWER))
        second = env.step(Submit())
        assert 0.0 < second.info["score"] <= 1.0
        env.step(EditFile("solution.py", SLOWER, FAST))
        third = env.step(Submit())
        assert third.info["score"] == 1.0 and third.terminated
        # Step rewards add up to the episode reward.
        total = first.reward + second.reward + third.reward
        assert abs(total - third.info["episode_reward"]) < 1e-9


async def test_the_oracle_agent_solves_it_in_the_async_env(perf_task):
    agent = make_agent("oracle", perf_task)
    env = AsyncCodingEnv(perf_task, EnvConfig())
    await env.reset()
    scores = []
    for action in agent.script():
        step = await env.step(action)
        if "score" in step.info:
            scores.append(step.info["score"])
    env.close()
    assert scores == [0.0, 1.0]


def test_noop_scores_zero(perf_task):
    with CodingEnv(perf_task) as env:
        env.reset()
        for action in make_agent("noop", perf_task).script():
            step = env.step(action)
    assert step.info["score"] == 0.0


def test_a_suite_of_performance_tasks_loads_like_a_coding_suite(tmp_path):
    task = write_task(tmp_path / "suite")
    write_suite_index(tmp_path / "suite", [task.id], {"kind": "perf"})
    assert load_suite(tmp_path / "suite") == [task]
    assert load_task(task.root) == task


def test_gymnasium_makes_a_performance_task_by_folder(perf_task):
    env = gymnasium.make(ENV_ID, task=perf_task.root, max_steps=4)
    obs, info = env.reset()
    assert info["task_id"] == "row_sq" and "row_sq" in obs
    call = {"id": "c1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
    _, reward, term, _, info = env.step(json.dumps(call))
    assert info["score"] == 0.0 and reward == 0.0 and not term
    env.close()


async def test_verifiers_env_prompts_with_the_tasks_own_system_prompt(perf_task):
    env = VerifiersCodingEnv([perf_task])
    row = env.dataset[0]
    assert row["prompt"][0]["content"] == SYSTEM_PROMPT
    state = await env.setup_state({"info": row["info"], "turn": 0})
    call = {"id": "c1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
    replies = await env.env_response([{"role": "assistant", "tool_calls": [call]}], state)
    assert replies[0]["content"].startswith("Score: 0.000")
    await env.cleanup(state)


def test_a_malformed_task_json_names_the_file_and_field(perf_task):
    import pytest

    from kvharness.errors import FormatError

    path = perf_task.root / "task.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "calls": "five"}))
    with pytest.raises(FormatError, match=r"task\.json:1: field 'calls' is missing"):
        load_task(perf_task.root)
    path.write_text(json.dumps({**doc, "target_speedup": 0.5}))
    with pytest.raises(FormatError, match="target_speedup must be > 1"):
        load_task(perf_task.root)
