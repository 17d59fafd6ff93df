"""Adapters: Gymnasium registration and the verifiers-style rollout interface, over real tasks in
the real sandbox."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from kvharness.env.adapters.gym import ENV_ID, GymCodingEnv
from kvharness.env.adapters.verifiers import VerifiersCodingEnv
from kvharness.env.api import EnvConfig
from kvharness.env.harness.demo import make_demo_suite, make_demo_task
from kvharness.env.sandbox import python_env_paths
from kvharness.env.task import Task
from kvharness.testing import VllmReplica


@pytest.fixture
def pyenv(env_venv: Path) -> tuple[Path, ...]:
    """The tasks' venv (pytest only) for commands and grading."""
    return python_env_paths(env_venv)


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return make_demo_task(tmp_path / "suite", "add")


def _call(name: str, **args: str) -> dict[str, object]:
    return {"id": f"c-{name}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip


FIX = _call("edit_file", path="calc/__init__.py", search="return a - b", replace="return a + b")


def test_gymnasium_make_by_registered_id(pyenv: tuple[Path, ...], task: Task) -> None:
    assert ENV_ID in gymnasium.registry
    env = gymnasium.make(ENV_ID, task=task.root, max_steps=5, python_env=pyenv)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs) and "add(2, 3)" in obs
    assert info["task_id"] == "demo-add"
    obs, reward, term, trunc, _ = env.step(json.dumps(FIX))
    assert obs == "Edited calc/__init__.py." and (reward, term, trunc) == (0.0, False, False)
    obs, reward, term, trunc, info = env.step(json.dumps(_call("submit")))
    assert (reward, term, trunc, info["score"]) == (1.0, True, False, 1.0)
    env.close()


def test_gymnasium_module_qualified_id_and_suite_lookup(
    pyenv: tuple[Path, ...], tmp_path: Path
) -> None:
    make_demo_suite(tmp_path / "suite", ("add", "clamp"))
    env = gymnasium.make(
        "kvharness.env.adapters.gym:kvharness/CodingEnv-v0",
        task=tmp_path / "suite",
        task_id="demo-clamp",
        python_env=pyenv,
    )
    obs, _ = env.reset()
    assert "clamp(5, 0, 3)" in obs
    env.close()


def test_gymnasium_env_checker_passes(pyenv: tuple[Path, ...], task: Task) -> None:
    env = GymCodingEnv(task, max_steps=3, python_env=pyenv)
    check_env(env, skip_render_check=True)
    env.close()


def test_gym_observations_are_sanitised_to_the_text_space(
    pyenv: tuple[Path, ...], task: Task
) -> None:
    env = GymCodingEnv(task, render_mode="ansi", python_env=pyenv)
    env.reset()
    obs, *_ = env.step({"name": "bash", "arguments": {"command": "printf 'caf\\xc3\\xa9 \\x01ok'"}})
    assert obs.endswith("caf? ?ok") and env.observation_space.contains(obs)
    assert env.render() == obs
    with pytest.raises(TypeError, match="unknown EnvConfig field"):
        GymCodingEnv(task, max_stepz=3)
    env.close()


async def test_verifiers_interface_scores_a_scripted_rollout(
    pyenv: tuple[Path, ...], tmp_path: Path
) -> None:
    tasks = make_demo_suite(tmp_path / "suite", ("add", "clamp"))
    env = VerifiersCodingEnv(tasks, EnvConfig(max_submissions=2, python_env=pyenv))
    rows = env.dataset
    assert [r["info"]["task_id"] for r in rows] == ["demo-add", "demo-clamp"]
    assert (
        rows[0]["prompt"][0]["role"] == "system" and "add(2, 3)" in rows[0]["prompt"][1]["content"]
    )
    assert [t["function"]["name"] for t in env.oai_tools][-1] == "submit"

    state = await env.setup_state({"info": rows[0]["info"], "turn": 0})
    messages = list(rows[0]["prompt"])
    turns = [
        [_call("read_file", path="calc/__init__.py"), _call("submit")],
        [FIX, _call("submit")],
    ]
    for calls in turns:
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        assert not await env.is_completed(messages, state)
        replies = await env.env_response(messages, state)
        assert [r["tool_call_id"] for r in replies] == [c["id"] for c in calls]
        messages += replies
    assert "def add(a, b)" in messages[-5]["content"]
    assert messages[-1]["content"].startswith("Score: 1.000")
    assert await env.is_completed(messages, state)
    await env.cleanup(state)
    score = await env.rubric.score_rollout(rows[0]["prompt"], messages, "", state)
    assert score["reward"] == 1.0
    assert score["metrics"] == {
        "episode_reward": 1.0, "best_score": 1.0, "last_score": 1.0, "submissions": 2.0,
    }  # fmt: skip
    assert json.loads(env.dumps_state(state))["submissions"][1]["score"] == 1.0
    batch = await env.rubric.score_rollouts([rows[0]["prompt"]], [messages], [""], [state])
    assert batch["reward"] == [1.0]


async def test_verifiers_unknown_task_and_plain_answer_completes(
    pyenv: tuple[Path, ...], task: Task
) -> None:
    env = VerifiersCodingEnv([task], EnvConfig(python_env=pyenv))
    with pytest.raises(KeyError, match="not a task"):
        await env.setup_state({"info": {"task_id": "nope"}})
    state = await env.setup_state({"info": {"task_id": task.id}})
    assert await env.is_completed([{"role": "assistant", "content": "done"}], state)
    await env.cleanup(state)
    assert "coding_env" not in state and state["submissions"] == []


@pytest.mark.vllm
async def test_verifiers_rollout_with_the_openai_client(
    pyenv: tuple[Path, ...], vllm_replicas: Sequence[VllmReplica], task: Task
) -> None:
    from openai import AsyncOpenAI

    replica = vllm_replicas[0]
    env = VerifiersCodingEnv([task], EnvConfig(python_env=pyenv))
    client = AsyncOpenAI(base_url=replica.url + "/v1", api_key="none")
    row = env.dataset[0]
    # The tiny random model cannot call tools (and the server has no tool parser): one turn,
    # answered in plain text, so the episode completes without a submission.
    completion, state = await env.rollout(
        client, replica.model, row["prompt"], info=row["info"],
        sampling_args={"max_tokens": 8, "tool_choice": "none"},
    )  # fmt: skip
    await client.close()
    assert state["turn"] == 1 and len(completion) == 1 and completion[0]["role"] == "assistant"
    assert state["responses"][0].usage.prompt_tokens > 0
    score = await env.rubric.score_rollout(row["prompt"], completion, "", state)
    assert score["reward"] == 0.0
