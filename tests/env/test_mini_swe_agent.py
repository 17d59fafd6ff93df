"""mini-swe-agent (the real PyPI harness, in .venv-mini-swe-agent) as an env agent: its commands in
the env's sandbox, its submission graded by the hidden tests, its own trajectory file kept and the
episode's model calls read from it. One test drives it with mini's own scripted model (no engine),
one with the real small model served by vLLM through ``kvharness env run``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kvharness.cli import main
from kvharness.env.api import EnvConfig
from kvharness.env.harness.client import ChatClient
from kvharness.env.harness.demo import make_demo_suite
from kvharness.env.harness.mini_swe_agent import (
    MINI_TOOLS,
    PYTHON_VAR,
    mini_python,
    read_trajectory,
    run_mini_episode,
    trajectory_calls,
    trajectory_path,
)
from kvharness.env.harness.record import read_rollouts
from kvharness.env.sandbox import Limits, python_env_paths
from kvharness.env.task import Task
from kvharness.errors import UserError
from kvharness.testing import VllmReplica


@pytest.fixture(scope="module")
def mini() -> Path:
    """mini-swe-agent's interpreter (``make mini-swe-agent``, a prerequisite of ``make test``)."""
    try:
        return mini_python()
    except UserError as err:
        pytest.skip(str(err))


def test_a_missing_environment_says_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_demo_suite(tmp_path / "suite", ("add",))
    monkeypatch.setenv(PYTHON_VAR, str(tmp_path / "no-venv" / "bin" / "python"))
    code = main(
        ["env", "run", "--backend", "http://127.0.0.1:9", "--tasks", str(tmp_path / "suite"),
         "--agent", "mini-swe-agent", "--out", str(tmp_path / "out")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "make mini-swe-agent" in err, err
    assert not (tmp_path / "out" / "rollouts.jsonl").exists()


def test_env_run_help_lists_the_harness(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["env", "run", "--help"])
    assert "mini-swe-agent" in capsys.readouterr().out


def test_the_tools_kvharness_tokenises_with_are_minis(mini: Path) -> None:
    code = (
        "import json; from minisweagent.models.utils.actions_toolcall import BASH_TOOL; "
        "print(json.dumps([BASH_TOOL]))"
    )
    env = {**os.environ, "MSWEA_SILENT_STARTUP": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([mini, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == list(MINI_TOOLS)


def _tool_reply(i: int, command: str) -> dict[str, object]:
    call_id = f"call_{i}"
    args = json.dumps({"command": command})
    return {
        "role": "assistant",
        "content": f"step {i}",
        "tool_calls": [{"id": call_id, "type": "function",
                        "function": {"name": "bash", "arguments": args}}],
        "extra": {"actions": [{"command": command, "tool_call_id": call_id}], "cost": 0.0},
    }  # fmt: skip


@pytest.mark.slow
async def test_minis_scripted_model_fixes_the_bug_in_the_sandbox(
    mini: Path, tmp_path: Path, env_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mini-swe-agent's own deterministic model plays a fix: its commands run in the sandbox
    (the repository at /work/repo, not the host's copy), its submission line makes the env grade
    the repository (score 1.0), and the trajectory's calls are the episode's. The trajectories'
    folder is given relative to the working folder, as ``env run --out runs/x`` gives it."""
    monkeypatch.chdir(tmp_path)
    [task] = make_demo_suite(tmp_path / "suite", ("add",))
    fixed = (task.fix_dir / task.mutation.file).read_text()
    script = [
        _tool_reply(0, "pwd && ls"),
        _tool_reply(1, f"cat > {task.mutation.file} <<'EOF'\n{fixed}EOF"),
        _tool_reply(2, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]
    config = EnvConfig(
        max_steps=5, limits=Limits(timeout_s=60), python_env=python_env_paths(env_venv)
    )
    over = {
        "model": {
            "model_class": "minisweagent.models.test_models.DeterministicToolcallModel",
            "outputs": script,
        }
    }
    async with ChatClient("http://127.0.0.1:9", "scripted") as client:
        ep = await run_mini_episode(
            task, client, config, episode=f"{task.id}/0", t0=0.0,
            trajectories=Path("traj"), extra_config=over,
        )  # fmt: skip
    assert ep.error is None, ep.error
    assert ep.terminated and ep.reward == 1.0
    assert [s.score for s in ep.submissions] == [1.0]
    assert [r.tool for r in ep.tool_runs] == ["bash", "bash", "bash", "submit"]
    doc = read_trajectory(trajectory_path(tmp_path / "traj", ep.episode))
    assert doc["info"]["exit_status"] == "Submitted"
    assert len(trajectory_calls(doc)) == len(ep.calls) == doc["info"]["model_stats"]["api_calls"]
    first_output = next(m for m in doc["messages"] if m["role"] == "tool")["content"]
    assert "/work/repo" in first_output and "README.md" in first_output
    assert ep.calls[1].tools == ("bash",) and ep.calls[1].gap > 0
    assert (task.repo_dir / task.mutation.file).read_text() != fixed  # the host copy untouched


@pytest.mark.vllm
@pytest.mark.slow
def test_env_run_mini_swe_agent_with_the_real_model(
    mini: Path,
    real_replica: VllmReplica,
    smoke_suite: list[Task],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``kvharness env run --agent mini-swe-agent`` on the smoke suite against the real small
    model: every episode completes and is scored as the env scores any agent, each leaves
    mini's own trajectory, and its model calls are the rollout's, token counts included."""
    suite = smoke_suite[0].root.parent
    out = tmp_path / "run"
    code = main(
        ["env", "run", "--backend", real_replica.url, "--tasks", str(suite),
         "--agent", "mini-swe-agent", "--limit", "2", "--concurrency", "2",
         "--max-steps", "3", "--max-tokens", "96", "--out", str(out)]
    )  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    episodes = read_rollouts(out / "rollouts.jsonl")
    assert len(episodes) == 2
    statuses = []
    for ep in episodes:
        assert ep.agent == "mini-swe-agent" and ep.error is None
        assert 0.0 <= ep.reward <= 1.0
        assert all(0.0 <= s.score <= 1.0 for s in ep.submissions) and len(ep.submissions) <= 1
        doc = read_trajectory(trajectory_path(out / "trajectories", ep.episode))
        statuses.append(doc["info"]["exit_status"])
        calls = trajectory_calls(doc)
        assert 1 <= len(calls) == len(ep.calls) == doc["info"]["model_stats"]["api_calls"] <= 3
        assert all(c.call.prompt_tokens > 0 for c in ep.calls)
        assert [c.call.prompt_tokens for c in ep.calls] == [c.prompt_tokens for c in calls]
        assert all(c.call.done >= c.call.sent >= 0 for c in ep.calls)
        assert (ep.submissions != []) == (doc["info"]["exit_status"] == "Submitted")
    workload = (out / "workload.jsonl").read_text().splitlines()
    assert len(workload) > 2
    print(f"mini-swe-agent with the real model: exits {statuses}")
