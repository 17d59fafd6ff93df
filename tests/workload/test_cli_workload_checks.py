"""`kvharness workload` refuses bad options, bad synthetic specs and unusable output paths as one
line with exit status 2, before any work."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvharness.cli import _workload, main
from kvharness.testing.cli import run_cli
from kvharness.workload import format as wformat


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--block-size", "0"], "argument --block-size: expected an integer >= 1"),
        (["--block-size", "-1"], "argument --block-size: expected an integer >= 1"),
        (["--block-size", "x"], "argument --block-size: expected an integer >= 1"),
    ],
)
@pytest.mark.parametrize("spec", ["synthetic:sessions=1", "MOONCAKE"])
def test_stats_refuses_a_bad_block_size_at_parse_time(
    argv: list[str], message: str, spec: str, traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = str(traces / "mooncake" / "conversation_trace.jsonl") if spec == "MOONCAKE" else spec
    assert run_cli(["workload", "stats", spec, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert err.startswith("kvharness workload stats: error: ")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("synthetic:sessions=100000000", "sessions must be in [1, 100000], got 100000000"),
        ("synthetic:steps_max=1000000000", "steps_max must be in [1, 10000]"),
        ("synthetic:max_context=1000000000000", "max_context must be in [1, 1e+07]"),
        ("synthetic:append_sigma=1e6", "append_sigma must be in [0.01, 4]"),
        ("synthetic:rate=nan", "rate must be in [1e-06, 1e+06], got nan"),
        ("synthetic:steps_median=inf", "steps_median must be in [1, 10000], got inf"),
    ],
)
def test_synthetic_options_out_of_bounds_are_one_line(
    spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["workload", "stats", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_synthetic_help_lists_each_options_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["workload", "stats", "--help"]) == 0
    out = capsys.readouterr().out
    assert "(default 32; 1 to 100000)" in out and "(default 0.06; 0 to 1)" in out


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("missing/w.jsonl", "does not exist"),
        ("file/w.jsonl", "is a file, not a folder"),
        ("folder", "is a folder; give a file path"),
        ("/sys/kvharness-w.jsonl", "cannot write in /sys"),
    ],
)
def test_convert_checks_its_output_first_and_leaves_nothing(
    output: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    loaded: list[str] = []
    monkeypatch.setattr(_workload, "load_workload", lambda spec, **kw: loaded.append(spec))
    assert main(["workload", "convert", "synthetic:sessions=2", output]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(
        f"kvharness workload: error: OUTPUT {output}: "
    )
    assert message in err and loaded == []
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["file", "folder"]


def test_convert_that_fails_while_writing_leaves_no_tmp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(workload: object) -> Iterator[bytes]:
        yield b"{}\n"
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "w.jsonl.tmp"))

    monkeypatch.setattr(wformat, "dumps_lines", full_disk)
    assert main(["workload", "convert", "synthetic:sessions=2", str(tmp_path / "w.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"kvharness workload: error: {tmp_path / 'w.jsonl.tmp'}: No space left on device"
    assert list(tmp_path.iterdir()) == []
