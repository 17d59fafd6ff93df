"""`kvharness env run` refuses bad input with one-line errors, before any episode starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kvharness.cli import main
from kvharness.env.harness.demo import make_demo_suite


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--reward", "mean"], "unknown reward rule 'mean'"),
        (["--reward", "discounted:x"], "is not a number"),
        (["--only", "demo-add,nope"], "no task nope in"),
        (["--concurrency", "0"], "--concurrency must be >= 1"),
        (["--limit", "0"], "no tasks to run"),
        (["--tokenizer", "/no/such/tokenizer"], "no tokenizer at /no/such/tokenizer"),
        ([], "cannot list models at http://127.0.0.1:"),
    ],
)
def test_env_run_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    make_demo_suite(tmp_path / "suite")
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    argv = ["env", "run", "--endpoint", endpoint, "--tasks", str(tmp_path / "suite")]
    code = main([*argv, "--out", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("kvharness env: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_env_run_missing_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["env", "run", "--endpoint", "http://x", "--tasks", str(tmp_path / "none"), "--out", "o"]
    )
    assert code == 2 and "no such suite directory" in capsys.readouterr().err


def test_env_help_lists_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["env", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "run" in out and "build-suite" in out


async def test_a_broken_task_ends_its_episode_not_the_run(tmp_path: Path) -> None:
    import shutil

    from kvharness.env.api import EnvConfig
    from kvharness.env.harness.client import ChatClient
    from kvharness.env.harness.loop import run_episodes

    tasks = make_demo_suite(tmp_path / "suite")
    shutil.rmtree(tasks[0].repo_dir)  # the snapshot is gone: reset cannot copy it
    async with ChatClient(f"http://127.0.0.1:{_closed_port()}", "m") as client:
        [broken, other] = await run_episodes(tasks, "noop", client, EnvConfig())
    assert broken.error is not None and broken.error.startswith("env: FileNotFoundError")
    assert broken.reward == 0.0 and not broken.calls
    # The other task got to call the (absent) model: its own, separate failure.
    assert other.error is not None and other.error.startswith("model: ")
