"""`kvharness env run` refuses bad input with one-line errors, before any episode starts."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from kvharness.cli import main
from kvharness.env.harness.demo import make_demo_suite
from kvharness.testing.cli import run_cli
from kvharness.testing.fake_openai import FakeOpenAI
from kvharness.workload.format import load


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
    argv = ["env", "run", "--backend", endpoint, "--tasks", str(tmp_path / "suite")]
    code = main([*argv, "--out", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("kvharness env: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_env_run_missing_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["env", "run", "--backend", "http://x", "--tasks", str(tmp_path / "none"), "--out", "o"]
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


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--concurrency", "0"], "argument --concurrency: expected an integer >= 1, got '0'"),
        (["--repeats", "-1"], "argument --repeats: expected an integer >= 1"),
        (["--temperature", "nan"], "argument --temperature: expected a number >= 0 and <= 2"),
        (["--command-timeout", "0"], "argument --command-timeout: expected a number > 0"),
        (["--block-size", "0"], "argument --block-size: expected an integer >= 1"),
        (["--limit", "-1"], "argument --limit: expected an integer >= 0"),
    ],
)
def test_env_run_numbers_are_checked_at_parse_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["env", "run", "--backend", "http://x", "--tasks", str(tmp_path), "--out", "o"]
    assert run_cli([*argv, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("kvharness env run: error: ")
    assert message in err, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--backend", "http://x", "--tasks", "SUITE", "--out", "FILE"],
         "--out FILE: {tmp}/FILE is a file, not a folder"),
        (["run", "--backend", "http://x", "--tasks", "SUITE", "--out", "FILE/run"],
         "--out FILE/run: {tmp}/FILE is a file, not a folder"),
        (["run", "--backend", "http://x", "--tasks", "SUITE", "--out", "/sys/kvharness-env"],
         "--out /sys/kvharness-env: cannot write in /sys"),
        (["build-suite", "--out", "FILE"], "--out FILE: {tmp}/FILE is a file, not a folder"),
        (["build-suite", "--out", "/sys/kvharness-suite"],
         "--out /sys/kvharness-suite: cannot write in /sys"),
        (["run", "--tasks", "SUITE"], "give --backend, --out (or --resume DIR to continue a run)"),
    ],
)  # fmt: skip
def test_env_commands_check_out_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    argv: list[str], message: str,
) -> None:  # fmt: skip
    from kvharness.env.tasks import cli as tasks_cli

    monkeypatch.chdir(tmp_path)
    make_demo_suite(tmp_path / "SUITE")
    (tmp_path / "FILE").write_text("x")
    built: list[object] = []
    monkeypatch.setattr(tasks_cli, "run_build", lambda args: built.append(args) or 0)
    assert main(["env", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message.format(tmp=tmp_path) in err, err
    assert built == [] and sorted(p.name for p in tmp_path.iterdir()) == ["FILE", "SUITE"]


def _run_argv(fake: FakeOpenAI, root: Path, *extra: str) -> list[str]:
    return ["env", "run", "--backend", fake.url, "--tasks", str(root / "suite"),
            "--agent", "noop", "--tokenizer", "approx", "--out", str(root / "out"), *extra]  # fmt: skip


def test_resume_after_a_torn_rollout_runs_the_rest_and_keeps_every_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A crash mid-write leaves rollouts.jsonl ending in part of an episode: --resume cuts it off,
    says so, runs only the episodes not recorded, and writes the workload of them all."""
    tasks = make_demo_suite(tmp_path / "suite")
    out = tmp_path / "out"
    with FakeOpenAI(tokens=2) as fake:
        assert main(_run_argv(fake, tmp_path)) == 0
        first_run = fake.stats.requests
        rollouts = out / "rollouts.jsonl"
        first, second = rollouts.read_bytes().splitlines(keepends=True)
        rollouts.write_bytes(first + second[:100])
        kept = json.loads(first)["episode"]
        capsys.readouterr()
        calls = fake.stats.requests
        assert main(["env", "run", "--resume", str(out), "--backend", fake.url]) == 0
        assert fake.stats.requests - calls == first_run - 1  # one episode's one call fewer
    err = capsys.readouterr().err
    assert "rollouts.jsonl: dropped 100 bytes of a torn last line" in err
    lines = rollouts.read_bytes().splitlines(keepends=True)
    assert lines[0] == first and all(line.endswith(b"\n") for line in lines)
    episodes = [json.loads(line)["episode"] for line in lines]
    assert sorted(episodes) == sorted(f"{t.id}/0" for t in tasks) and episodes[0] == kept
    resumed = json.loads(lines[1])
    assert resumed["calls"][0]["sent"] >= max(c["done"] for c in json.loads(first)["calls"])
    workload = load(out / "workload.jsonl")
    assert [s.id for s in workload.sessions] == [f"{t.id}/0" for t in tasks]


def test_env_run_refuses_a_folder_that_holds_a_run_and_resume_with_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_demo_suite(tmp_path / "suite")
    out = tmp_path / "out"
    with FakeOpenAI(tokens=2) as fake:
        assert main(_run_argv(fake, tmp_path, "--only", "demo-add")) == 0
        before = (out / "rollouts.jsonl").read_bytes()
        capsys.readouterr()
        calls = fake.stats.requests
        assert main(_run_argv(fake, tmp_path)) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"kvharness env: error: {out} already holds a run; pick another --out or continue "
            f"it with --resume {out}"
        )
        assert main(["env", "run", "--resume", str(out), "--out", str(tmp_path / "o2")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert f"--resume {out} continues that run in its own folder; drop --out" in err
        assert main(["env", "run", "--resume", str(tmp_path / "suite")]) == 2
        assert "is not an env run folder" in capsys.readouterr().err
        assert fake.stats.requests == calls
    assert (out / "rollouts.jsonl").read_bytes() == before
    assert not (tmp_path / "o2").exists()


def test_a_run_saved_with_endpoint_resumes_and_endpoint_still_names_the_backend(
    tmp_path: Path,
) -> None:
    """config.json of a run started before --endpoint became --backend holds "endpoint"; it
    resumes, and --endpoint is still accepted as --backend's old name."""
    tasks = make_demo_suite(tmp_path / "suite")
    out = tmp_path / "out"
    with FakeOpenAI(tokens=2) as fake:
        argv = _run_argv(fake, tmp_path, "--only", tasks[0].id)
        assert main([a if a != "--backend" else "--endpoint" for a in argv]) == 0
        config = json.loads((out / "config.json").read_text())
        assert config["backend"] == fake.url and "endpoint" not in config
        config["endpoint"] = config.pop("backend")
        config["only"] = None
        (out / "config.json").write_text(json.dumps(config))
        calls = fake.stats.requests
        assert main(["env", "run", "--resume", str(out)]) == 0
        assert fake.stats.requests > calls
    lines = (out / "rollouts.jsonl").read_text().splitlines()
    episodes = [json.loads(line)["episode"] for line in lines]
    assert sorted(episodes) == sorted(f"{t.id}/0" for t in tasks)


def test_config_json_is_the_run_config_and_its_api_key_is_never_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """config.json holds every option of the run by its field name (seconds as _s), the tasks
    it ran, and of an API key only that one was given; resuming such a run wants the key again,
    and a config.json written before the renames (endpoint, command_timeout) still resumes."""
    tasks = make_demo_suite(tmp_path / "suite")
    out = tmp_path / "out"
    with FakeOpenAI(tokens=2) as fake:
        argv = _run_argv(fake, tmp_path, "--only", tasks[0].id, "--api-key", "s3cret",
                         "--command-timeout", "30")  # fmt: skip
        assert main(argv) == 0
        text = (out / "config.json").read_text()
        assert "s3cret" not in text
        config = json.loads(text)
        assert config["api_key"] == "set" and config["command_timeout_s"] == 30.0
        assert config["tasks_run"] == [tasks[0].id] and config["backend"] == fake.url
        capsys.readouterr()
        assert main(["env", "run", "--resume", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith("used an API key, which is not saved: give --api-key"), err
        old = {k: v for k, v in config.items() if k not in ("backend", "command_timeout_s")}
        old.update(endpoint=fake.url, command_timeout=30.0, api_key=None, only=None)
        (out / "config.json").write_text(json.dumps(old))
        calls = fake.stats.requests
        assert main(["env", "run", "--resume", str(out)]) == 0
        assert fake.stats.requests > calls
    episodes = [
        json.loads(line)["episode"] for line in (out / "rollouts.jsonl").read_text().splitlines()
    ]
    assert sorted(episodes) == sorted(f"{t.id}/0" for t in tasks)
