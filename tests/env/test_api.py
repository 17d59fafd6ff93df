"""CodingEnv / AsyncCodingEnv against a small hand-made task, through the real bubblewrap sandbox
and the real grader: tool actions, budgets, rewards, confinement, concurrency."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kvharness.env.actions import Bash, EditFile, ReadFile, Search, Submit
from kvharness.env.api import AsyncCodingEnv, CodingEnv, EnvConfig
from kvharness.env.harness.agents import Agent, CheatAgent, NoopAgent, OracleAgent
from kvharness.env.harness.demo import DEMO_ORIGINAL, make_demo_task
from kvharness.env.reward import RewardRule
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.env.task import Task

ORIGINAL = DEMO_ORIGINAL
MUTATED = DEMO_ORIGINAL.replace("return a + b", "return a - b")


def make_task(root: Path, task_id: str = "calc-add") -> Task:
    """``calc.add`` subtracts; tests/test_calc.py is hidden (one FAIL_TO_PASS, four PASS_TO_PASS)."""
    return make_demo_task(root, "add", task_id)


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return make_task(tmp_path / "suite")


_PYTHON_ENV: list[tuple[Path, ...]] = []


@pytest.fixture(autouse=True)
def _task_python_env(env_venv: Path) -> None:
    """Commands and grading run with the tasks' venv (pytest only, like a built suite's): the
    project's own venv also works but loads its pytest plugins in every graded run."""
    _PYTHON_ENV[:] = [python_env_paths(env_venv)]


def config(**kw: object) -> EnvConfig:
    base: dict[str, object] = {"limits": Limits(timeout_s=30), "python_env": _PYTHON_ENV[0]}
    base.update(kw)
    return EnvConfig(**base)  # type: ignore[arg-type]


FIX = EditFile("calc/__init__.py", "return a - b", "return a + b")


def test_reset_gives_issue_and_tools_and_a_private_copy(task: Task) -> None:
    env = CodingEnv(task, config())
    obs, info = env.reset(seed=0)
    assert "add(2, 3) returns -1" in obs
    assert info["task_id"] == "calc-add"
    assert [t["function"]["name"] for t in info["tools"]][-1] == "submit"
    repo = env.repo
    assert repo != task.repo_dir and (repo / "calc" / "__init__.py").read_text() == MUTATED
    assert not (repo / "tests").exists()  # hidden tests are not in the agent's copy
    env.close()
    assert not repo.exists()


def test_tools_bash_read_search_edit(task: Task) -> None:
    env = CodingEnv(task, config())
    env.reset()
    obs, reward, term, trunc, info = env.step(Bash("ls; echo err >&2; exit 3"))
    assert "calc" in obs and "README.md" in obs and "exit code: 3" in obs and "err" in obs
    assert (reward, term, trunc, info["tool"], info["error"]) == (0.0, False, False, "bash", None)
    assert info["duration_s"] > 0
    obs, *_ = env.step(ReadFile("calc/__init__.py"))
    assert obs == MUTATED
    obs, *_ = env.step(Search("def [a-z]+", None))
    assert "calc/__init__.py:4:def add(a, b):" in obs and "clamp" in obs
    obs, *_ = env.step(Search("nothing_like_this"))
    assert obs == "No matches."
    obs, _, _, _, info = env.step(FIX)
    assert obs == "Edited calc/__init__.py." and info["error"] is None
    assert "return a + b" in (env.repo / "calc" / "__init__.py").read_text()
    # The sandbox sees the edit made on the host.
    obs, *_ = env.step(Bash("python -c 'import calc; print(calc.add(2, 3))'"))
    assert obs.endswith("5")
    env.close()


def test_edit_errors_are_observations_and_cost_a_step(task: Task) -> None:
    env = CodingEnv(task, config(max_steps=10))
    env.reset()
    obs, _, _, _, info = env.step(EditFile("calc/__init__.py", "return a * b", "x"))
    assert obs.startswith("error: edit_file: the search text was not found")
    assert info["error"] and info["step"] == 0
    obs, *_ = env.step(EditFile("calc/__init__.py", "return", "x"))
    assert "occurs 5 times" in obs
    obs, *_ = env.step(EditFile("nope.py", "a", "b"))
    assert "no such file" in obs
    obs, *_ = env.step({"name": "bash", "arguments": "{oops"})
    assert "not valid JSON" in obs
    obs, _, _, _, info = env.step({"name": "frobnicate"})
    assert "unknown tool" in obs and info["tool"] is None and info["step"] == 4
    obs, *_ = env.step(EditFile("notes/new.txt", "", "hello"))
    assert obs == "Created notes/new.txt." and (env.repo / "notes/new.txt").read_text() == "hello"
    env.close()


@pytest.mark.parametrize(
    "action",
    [
        ReadFile("../hidden/tests/test_calc.py"),
        ReadFile("../../calc-add/task.json"),
        ReadFile("/../../../etc/passwd"),
        EditFile("../fix/calc/__init__.py", "return", "x"),
        EditFile("../escaped.py", "", "x = 1"),
        Search("def", "../.."),
    ],
)
def test_path_escapes_are_refused(task: Task, action: object) -> None:
    env = CodingEnv(task, config())
    env.reset()
    outside = env.repo.parent
    obs, _, _, _, info = env.step(action)  # type: ignore[arg-type]
    assert "outside the repository" in obs and info["error"]
    assert not (outside / "escaped.py").exists()
    assert (task.fix_dir / "calc" / "__init__.py").read_text() == ORIGINAL
    env.close()


def test_symlink_escape_via_read_and_edit_is_refused(task: Task, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    env = CodingEnv(task, config())
    env.reset()
    # The agent makes a link inside its copy pointing at a host file, then uses the file tools.
    (env.repo / "link.txt").symlink_to(secret)
    obs, *_ = env.step(ReadFile("link.txt"))
    assert "outside the repository" in obs and "top secret" not in obs
    obs, *_ = env.step(EditFile("link.txt", "top", "bottom"))
    assert "outside the repository" in obs and secret.read_text() == "top secret"
    env.close()


def test_oracle_noop_and_submission_budget(task: Task) -> None:
    env = CodingEnv(task, config(max_submissions=2, reward=RewardRule("best")))
    env.reset()
    obs, reward, term, trunc, info = env.step(Submit())
    assert info["score"] == 0.0 and reward == 0.0 and not term and "Score: 0.000" in obs
    env.step(FIX)
    obs, reward, term, trunc, info = env.step(Submit())
    assert info["score"] == 1.0 and reward == 1.0 and term and not trunc
    assert info["episode_reward"] == 1.0 and env.episode_reward() == 1.0
    assert [s.score for s in env.submissions] == [0.0, 1.0]
    assert [s.step for s in env.submissions] == [0, 2]
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(Submit())
    env.close()


def test_submissions_exhausted_terminates_and_budget_is_enforced(task: Task) -> None:
    env = CodingEnv(task, config(max_submissions=1))
    env.reset()
    _, reward, term, _, info = env.step(Submit())
    assert term and reward == 0.0 and info["submissions"] == 1


def test_step_budget_truncates(task: Task) -> None:
    env = CodingEnv(task, config(max_steps=2))
    env.reset()
    assert env.step(Bash("true"))[3] is False
    _, _, term, trunc, _ = env.step(Bash("true"))
    assert trunc and not term
    env.close()


def test_broken_pass_to_pass_scores_zero_and_last_rule(task: Task) -> None:
    env = CodingEnv(task, config(reward=RewardRule("last"), stop_on_solve=False))
    env.reset()
    env.step(FIX)
    _, r1, term, *_ = env.step(Submit())
    assert r1 == 1.0 and not term
    # Now break clamp (a PASS_TO_PASS test): the fix still passes FAIL_TO_PASS, but scores 0.
    env.step(EditFile("calc/__init__.py", "        return high", "        return low"))
    _, r2, _, _, info = env.step(Submit())
    assert (r1, r2, info["score"], env.episode_reward()) == (1.0, -1.0, 0.0, 0.0)
    env.close()


def test_cheating_on_tests_scores_zero(task: Task) -> None:
    env = CodingEnv(task, config())
    env.reset()
    conftest = (
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
    )
    env.step(EditFile("conftest.py", "", conftest))
    env.step(Bash("mkdir -p tests && echo 'def test_add(): pass' > tests/test_calc.py"))
    _, reward, _, _, info = env.step(Submit())
    assert info["score"] == 0.0 and reward == 0.0
    env.close()


def test_openai_json_actions(task: Task) -> None:
    env = CodingEnv(task, config())
    env.reset()
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": json.dumps({"path": "README.md"})},
    }
    assert env.step(call).observation == "calc: tiny arithmetic helpers\n"
    assert env.step(json.dumps(call)).observation == "calc: tiny arithmetic helpers\n"
    env.close()


def test_step_before_reset_is_an_error(task: Task) -> None:
    with pytest.raises(RuntimeError, match="reset"):
        CodingEnv(task, config()).step(Submit())


async def test_async_episodes_run_concurrently(tmp_path: Path) -> None:
    tasks = [make_task(tmp_path / "suite", f"calc-{i}") for i in range(4)]
    spans: list[tuple[float, float]] = []

    async def episode(task: Task, fix: bool) -> float:
        env = AsyncCodingEnv(task, config())
        await env.reset()
        loop = asyncio.get_running_loop()
        start = loop.time()
        await env.step(Bash("sleep 2"))
        spans.append((start, loop.time()))
        if fix:
            await env.step(FIX)
        result = await env.step(Submit())
        env.close()
        return result.reward

    rewards = await asyncio.gather(*(episode(t, i % 2 == 0) for i, t in enumerate(tasks)))
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    # The four sleeping commands were in flight at the same time: every one started before any
    # one finished.
    assert max(s for s, _ in spans) < min(e for _, e in spans)


def test_special_and_huge_files(task: Task) -> None:
    env = CodingEnv(task, config(max_observation_chars=1000))
    env.reset()
    env.step(Bash("mkfifo pipe && head -c 100000 /dev/zero | tr '\\0' x > big.txt"))
    # Reading a FIFO the agent made would block the host: refused.
    obs, *_ = env.step(ReadFile("pipe"))
    assert obs == "error: read_file: pipe is not a regular file"
    obs, *_ = env.step(EditFile("pipe", "a", "b"))
    assert obs == "error: edit_file: pipe is not a regular file"
    obs, *_ = env.step(ReadFile("calc"))
    assert obs == "error: read_file: calc is a directory"
    obs, *_ = env.step(ReadFile("big.txt"))
    assert obs.startswith("x" * 1000) and "more characters not shown" in obs and len(obs) < 1100
    # Grading never opens a FIFO the agent made (it is not a source file): it is left out, and
    # the submission is graded as usual.
    obs, reward, term, _, info = env.step(Submit())
    assert obs.startswith("Score: 0.000") and not term
    assert info["submissions"] == 1 and reward == 0.0 and info["grade"].tampered == ()
    env.close()


def _play(env: CodingEnv, agent: Agent) -> list[float]:
    """Play a scripted agent's actions to the end of the episode; the scores of its submits."""
    env.reset()
    scores = []
    while not agent.finished:
        for action in agent.decide({"role": "assistant", "content": ""}):
            result = env.step(action)
            if "score" in result.info:
                scores.append(result.info["score"])
            if result.terminated or result.truncated:
                return scores
    return scores


def test_scripted_agents_on_real_tasks(smoke_suite: list[Task]) -> None:
    """On real tasks (a pinned sdist, an AST mutation, hidden tests): the oracle's wrong attempt
    scores 0 and its fix 1.0; submitting at once scores 0; attacking the tests scores 0."""
    assert smoke_suite
    for task in smoke_suite:
        env = CodingEnv(task, config())
        assert _play(env, OracleAgent(task)) == [0.0, 1.0], task.id
        assert env.episode_reward() == 1.0
        assert _play(env, NoopAgent(task)) == [0.0], task.id
        assert _play(env, CheatAgent(task)) == [0.0], task.id
        assert env.episode_reward() == 0.0
        env.close()


def test_episode_copies_are_removed_on_close_reset_exit_and_gc(task: Task) -> None:
    import gc

    with CodingEnv(task, config()) as env:
        env.reset()
        first = env.repo
        env.reset()  # a new episode replaces the old copy
        assert not first.exists() and env.repo.exists()
        second = env.repo
    assert not second.exists()
    dropped = CodingEnv(task, config())
    dropped.reset()
    third = dropped.repo
    del dropped
    gc.collect()
    assert not third.exists()


async def test_async_env_context_manager(task: Task) -> None:
    async with AsyncCodingEnv(task, config()) as env:
        await env.reset()
        repo = env.repo
        assert (await env.step(ReadFile("README.md"))).observation.startswith("calc")
    assert not repo.exists()


def test_wall_time_budget_truncates(task: Task) -> None:
    with CodingEnv(task, config(max_wall_s=0.2)) as env:
        env.reset()
        _, _, term, trunc, _ = env.step(Bash("sleep 0.3"))
        assert trunc and not term


def test_time_discounted_reward_uses_seconds_since_reset(task: Task) -> None:
    rule = RewardRule("discounted", discount=0.5, unit="second")
    with CodingEnv(task, config(reward=rule)) as env:
        env.reset()
        env.step(FIX)
        _, reward, term, _, _ = env.step(Submit())
        [sub] = env.submissions
        assert term and sub.score == 1.0 and sub.elapsed > 0
        assert reward == pytest.approx(0.5**sub.elapsed) and 0 < reward < 1


def test_a_full_workspace_is_an_observation_and_grading_still_works(task: Task) -> None:
    env = CodingEnv(task, config(limits=Limits(timeout_s=30, workspace_bytes=8 << 20)))
    env.reset()
    obs, *_ = env.step(Bash("head -c 20M /dev/zero > big.bin"))
    assert "No space left on device" in obs and "the workspace is full" in obs
    assert (env.repo / "big.bin").stat().st_size <= 8 << 20
    env.step(FIX)
    assert env.step(Submit()).info["score"] == 1.0
    env.close()
