"""`kvharness bench` command line: options, errors as one line, the no-target default."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import kvharness.sim
from kvharness.cli import main
from kvharness.report.io import read_run_records
from kvharness.testing.cli import run_cli
from kvharness.testing.fake_openai import FakeOpenAI


def test_no_target_runs_the_simulators_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(kvharness.sim, "run_default", lambda: calls.append(1) or [object()])
    assert main(["bench"]) == 0
    assert calls == [1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "localhost:8000"], "is not an http(s):// URL"),
        (["--target", "http://x", "--rate", "0"], "argument --rate: expected a number > 0, got '0'"),
        (["--target", "http://x", "--rate", "nan"], "argument --rate: expected a number > 0"),
        (["--target", "http://x", "--max-attempts", "0"],
         "argument --max-attempts: expected an integer >= 1 and <= 1000, got '0'"),
        (["--target", "http://x", "--engine-block-size", "0"],
         "argument --engine-block-size: expected an integer >= 1"),
        (["--target", "http://x", "--timeout", "-1"], "argument --timeout: expected a number > 0"),
        (["--target", "http://x", "--backoff", "-1"], "argument --backoff: expected a number >= 0"),
        (["--target", "http://x", "--concurrency", "0"], "argument --concurrency: expected"),
        (["--target", "http://x", "--max-sessions", "0"], "argument --max-sessions: expected"),
        (["--target", "http://127.0.0.1:9", "--workload", "/nonexistent.jsonl", "--model", "m"],
         "no such workload"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run_cli(["bench", "--out", str(tmp_path / "run"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run").exists()


def test_resume_of_no_run_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--resume", "/nonexistent/run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a bench run directory" in err, err


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (lambda t: t / "file", "file is a file, not a folder"),
        (lambda t: t / "file" / "run", "file is a file, not a folder"),
        (lambda t: Path("/sys/kvharness-run"), "cannot write in /sys"),
    ],
)  # fmt: skip
def test_unusable_out_is_refused_before_any_request(
    out: Callable[[Path], Path], message: str, tmp_path: Path, fake: FakeOpenAI,
    agent_workload_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    (tmp_path / "file").write_text("x")
    argv = ["bench", "--target", fake.url, "--workload", str(agent_workload_file),
            "--model", "stub", "--no-metrics", "--out", str(out(tmp_path))]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("kvharness bench: error: --out ")
    assert message in err
    assert fake.stats.requests == 0


def _bench(fake: FakeOpenAI, workload: Path, run: Path) -> list[str]:
    return ["bench", "--target", fake.url, "--workload", str(workload), "--model", "stub",
            "--no-metrics", "--no-progress", "--out", str(run)]  # fmt: skip


def test_resume_after_a_torn_last_record_completes_and_report_reads_it(
    tmp_path: Path, fake: FakeOpenAI, agent_workload_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A crash mid-write leaves records.jsonl ending in part of a record; --resume cuts it off,
    says so, runs the turns not recorded and leaves a file every reader accepts."""
    run = tmp_path / "run"
    assert main(_bench(fake, agent_workload_file, run)) == 0
    records = run / "records.jsonl"
    lines = records.read_bytes().splitlines(keepends=True)
    total = len(lines)
    torn = lines[-3][:40]
    records.write_bytes(b"".join(lines[:-3]) + torn)  # the last three turns lost, one torn
    capsys.readouterr()
    before = fake.stats.requests
    assert main(["bench", "--resume", str(run), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"records.jsonl: dropped {len(torn)} bytes of a torn last line" in err
    assert fake.stats.requests - before == 3
    final = records.read_bytes()
    assert final.endswith(b"\n") and len(final.splitlines()) == total
    done = [(r.session, r.turn) for r in read_run_records(records)]
    assert len(set(done)) == len(done) == total
    assert main(["report", "show", str(run), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["turns_ok"] == total and summary["sessions_completed"] == 3
    assert main(["bench", "--resume", str(run), "--no-progress"]) == 0  # and again: nothing to do
    assert fake.stats.requests - before == 3


def test_resume_refuses_out(
    tmp_path: Path, fake: FakeOpenAI, agent_workload_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    run = tmp_path / "run"
    assert main(_bench(fake, agent_workload_file, run)) == 0
    capsys.readouterr()
    before = fake.stats.requests
    code = main(["bench", "--resume", str(run), "--out", str(tmp_path / "other")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"--resume {run} continues that run in its own directory; drop --out" in err
    assert fake.stats.requests == before and not (tmp_path / "other").exists()


def test_every_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    for opt in ("--target", "--workload", "--mode", "--resume", "--rate", "--concurrency",
                "--max-attempts", "--event-loop", "--vocab-size"):  # fmt: skip
        assert opt in out


def test_resume_with_damaged_metrics_fails_before_any_request(
    tmp_path: Path, fake: FakeOpenAI, agent_workload_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    run = tmp_path / "run"
    assert main(_bench(fake, agent_workload_file, run)) == 0
    (run / "metrics.json").write_text('[{"before": ')
    capsys.readouterr()
    before = fake.stats.requests
    assert main(["bench", "--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kvharness bench: error: {run / 'metrics.json'}:1: bad JSON")
    assert len(err.splitlines()) == 1 and fake.stats.requests == before
    assert sorted(p.name for p in run.iterdir() if p.name.endswith(".tmp")) == []
