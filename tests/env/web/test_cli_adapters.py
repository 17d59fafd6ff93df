"""`kvharness env web` on the command line (results as they go, resume, clear errors) and the
Gymnasium adapter, through the real browser."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from kvharness.cli import main
from kvharness.env.adapters.gym import WEB_ENV_ID, GymWebEnv

pytestmark = pytest.mark.slow


def test_list_and_run_then_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "web", "list"]) == 0
    assert "signup-form" in capsys.readouterr().out
    out = tmp_path / "run"
    run = ["env", "web", "run", "--agent", "oracle", "--families", "signup-form,chat",
           "--seeds", "0-1", "--out", str(out)]  # fmt: skip
    assert main(run) == 0
    printed = capsys.readouterr().out
    assert "4 episodes: mean reward 1.000, 4 solved" in printed
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["task"] for x in lines) == [
        "chat/0", "chat/1", "signup-form/0", "signup-form/1",
    ]  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["solved"] == 4 and summary["families"] == {"chat": 1.0, "signup-form": 1.0}
    assert not (out / "workload.jsonl").exists()  # no model was called
    # A run killed mid-write: the torn line and the episode after it are run again.
    kept = lines[0] + "\n" + lines[1][:25]
    (out / "episodes.jsonl").write_text(kept)
    assert main(["env", "web", "run", "--resume", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count(" steps ") == 3 and "4 episodes: mean reward 1.000" in printed
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 4
    assert main(run) == 2  # the folder holds a run
    assert "already holds a run" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--agent", "model"], "--agent model needs --backend"),
        (["--seeds", "x"], "--seeds: 'x' is not a number"),
        (["--families", "nope"], "unknown web task family 'nope'"),
    ],
)
def test_bad_options_say_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    assert main(["env", "web", "run", "--out", str(tmp_path / "x"), *extra]) == 2
    assert says in capsys.readouterr().err


def test_gymnasium_adapter() -> None:
    env = gymnasium.make(WEB_ENV_ID, task="signup-form/2", width=640, height=400, max_steps=6)
    try:
        obs, info = env.reset(seed=0)
        assert obs["screenshot"].shape == (400, 640, 3) and obs["screenshot"].dtype == np.uint8
        assert "Create an account" in obs["text"] and info["task"] == "signup-form/2"
        obs, reward, terminated, truncated, info = env.step("click(5, 5)")
        assert not truncated
        assert reward == 0.0 and not terminated and info["error"] is None
        assert env.unwrapped.last_duration_s > 0  # type: ignore[attr-defined]
        _, _, _, _, info = env.step("nonsense")
        assert "no action found" in info["error"]
    finally:
        env.close()
    checked = GymWebEnv("chat/0", width=640, height=400, max_steps=4)
    try:
        check_env(checked, skip_render_check=True)
    finally:
        checked.close()
