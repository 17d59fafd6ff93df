"""`kvharness bench` command line: options, errors as one line, the no-target default."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvharness.sim
from kvharness.cli import main


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
        (["--target", "http://x", "--rate", "0"], "--rate must be > 0"),
        (["--target", "http://x", "--max-attempts", "0"], "--max-attempts must be at least 1"),
        (["--resume", "/nonexistent/run"], "is not a bench run directory"),
        (["--target", "http://127.0.0.1:9", "--workload", "/nonexistent.jsonl", "--model", "m"],
         "no such workload"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["bench", "--out", str(tmp_path / "run"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_every_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    for opt in ("--target", "--workload", "--mode", "--resume", "--rate", "--concurrency",
                "--max-attempts", "--http-client", "--vocab-size"):  # fmt: skip
        assert opt in out
