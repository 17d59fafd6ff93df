"""The checks every subcommand shares: bounded numeric options and output paths."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kvharness.cli import build_parser
from kvharness.cli._args import bounded, output_dir, output_file, positive_float, positive_int
from kvharness.errors import UserError

UNWRITABLE = Path("/sys/kvharness-out")
"""A place no user can create files in (sysfs refuses even root)."""


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [(positive_int, "3", 3), (positive_float, "0.5", 0.5), (bounded(int, -1, 1), "-1", -1),
     (bounded(float, 0.0, 2.0), "2", 2.0)],
)  # fmt: skip
def test_values_in_bounds_pass(kind: Callable[[str], float], text: str, value: float) -> None:
    assert kind(text) == value


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        (positive_int, "0", "expected an integer >= 1, got '0'"),
        (positive_int, "1.5", "expected an integer >= 1, got '1.5'"),
        (positive_float, "0", "expected a number > 0, got '0'"),
        (positive_float, "nan", "expected a number > 0, got 'nan'"),
        (positive_float, "inf", "expected a number > 0, got 'inf'"),
        (bounded(int, 1, 10), "11", "expected an integer >= 1 and <= 10, got '11'"),
        (bounded(float, 0.0, 2.0), "x", "expected a number >= 0 and <= 2, got 'x'"),
    ],
)
def test_values_out_of_bounds_say_the_bound(
    kind: Callable[[str], float], text: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        kind(text)
    assert str(info.value) == message


def test_output_dir_accepts_new_and_existing_folders_and_creates_nothing(tmp_path: Path) -> None:
    assert output_dir(tmp_path / "a" / "b", "--out") == tmp_path / "a" / "b"
    assert output_dir(tmp_path, "--out") == tmp_path
    assert list(tmp_path.iterdir()) == []


def _path(tmp_path: Path, case: str) -> Path:
    """``file``: an existing file; ``under-file``: a path below one; ``folder``: an existing
    folder; ``missing-parent``: below a folder that does not exist; ``unwritable``: in sysfs."""
    (tmp_path / "f").write_text("x")
    return {
        "file": tmp_path / "f",
        "under-file": tmp_path / "f" / "sub",
        "folder": tmp_path,
        "missing-parent": tmp_path / "missing" / "w.jsonl",
        "unwritable": UNWRITABLE,
    }[case]


@pytest.mark.parametrize(
    ("case", "message"),
    [("file", "is a file, not a folder"), ("under-file", "is a file, not a folder"),
     ("unwritable", "cannot write in /sys")],
)  # fmt: skip
def test_output_dir_refuses(tmp_path: Path, case: str, message: str) -> None:
    path = _path(tmp_path, case)
    with pytest.raises(UserError, match=message) as info:
        output_dir(path, "--out")
    assert str(info.value).startswith(f"--out {path}: ")


@pytest.mark.parametrize(
    ("case", "message"),
    [("folder", "is a folder; give a file path"), ("missing-parent", "does not exist"),
     ("under-file", "is a file, not a folder"), ("unwritable", "cannot write in /sys")],
)  # fmt: skip
def test_output_file_refuses(tmp_path: Path, case: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        output_file(_path(tmp_path, case), "OUTPUT")


def test_a_read_only_folder_is_refused_unless_root(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    if os.geteuid() == 0:  # root writes anywhere the file system allows: the probe agrees
        assert output_file(ro / "w.jsonl", "OUTPUT") == ro / "w.jsonl"
    else:
        with pytest.raises(UserError, match="cannot write in"):
            output_file(ro / "w.jsonl", "OUTPUT")
    assert list(ro.iterdir()) == []


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """`kvharness ... | head`: the closed pipe ends the command with 141 and no traceback; the
    output path (a link to the pipe) is written through, not replaced."""
    stdout = Path("/dev/stdout")
    cmd = [sys.executable, "-m", "kvharness", "workload", "convert", "synthetic:sessions=400"]
    with subprocess.Popen(
        [*cmd, str(stdout)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read(1)
        proc.stdout.close()
        assert proc.wait(timeout=120) == 141
        assert proc.stderr.read() == b""
    assert stdout.is_symlink()


@pytest.mark.parametrize(
    "argv",
    [
        ["workload", "convert", "fixed", "out.jsonl", "--to", "mooncake"],
        ["workload", "convert", "--to", "mooncake", "fixed", "out.jsonl"],
        ["workload", "convert", "fixed", "--to", "mooncake", "out.jsonl"],
    ],
)
def test_options_may_sit_between_positionals(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.spec, args.output, args.to) == ("fixed", "out.jsonl", "mooncake")


def test_options_may_sit_between_many_positionals() -> None:
    args = build_parser().parse_args(["report", "compare", "a", "--json", "b", "--deadline", "5"])
    assert (args.run_dirs, args.json, args.deadline) == (["a", "b"], True, "5")


def test_an_optional_positional_before_a_required_one_is_still_optional() -> None:
    args = build_parser().parse_args(["workload", "convert", "--to", "mooncake", "out.jsonl"])
    assert (args.spec, args.output) == ("synthetic", "out.jsonl")


def test_a_stray_positional_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["workload", "convert", "fixed", "out.jsonl", "more"])
    assert info.value.code == 2
    assert "unrecognized arguments: more" in capsys.readouterr().err
