from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvharness.cli import main


def test_stats_json_on_conversation_trace(capsys: pytest.CaptureFixture[str], traces: Path) -> None:
    assert (
        main(["workload", "stats", str(traces / "mooncake" / "conversation_trace.jsonl"), "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 12031
    assert round(out["ideal_hit_ratio_blocks"], 3) == 0.366


def test_stats_table_default_synthetic(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workload", "stats", "synthetic:sessions=2,steps_median=5"]) == 0
    out = capsys.readouterr().out
    assert "ideal prefix-hit ratio (tokens)" in out and "requests (turns)" in out


def test_convert_then_stats_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.jsonl"
    assert main(["workload", "convert", "synthetic:sessions=3,seed=4", str(out)]) == 0
    capsys.readouterr()
    main(["workload", "stats", "synthetic:sessions=3,seed=4", "--json"])
    direct = json.loads(capsys.readouterr().out)
    main(["workload", "stats", str(out), "--json"])
    converted = json.loads(capsys.readouterr().out)
    assert (direct.pop("format"), converted.pop("format")) == ("synthetic", "kvharness")
    del direct["load_seconds"], converted["load_seconds"]
    assert direct == converted


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 1, "input_length": 4}\n')
    assert main(["workload", "stats", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{bad}:1:" in err and "missing required field" in err


_DEEP = b"[" * 100_000 + b"]" * 100_000
_HEADER = b'{"format": "kvharness-workload", "version": 1, "block_size": 4}\n'


def _kvharness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvharness", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        (
            "deep.jsonl",
            b'{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1], "x": '
            + _DEEP
            + b"}\n",
            ":1: JSON nested deeper than the decoder can follow",
        ),
        ("deep.traj", b'{"info": ' + _DEEP + b', "history": []}', ":1: JSON nested deeper"),
        (
            "negative.jsonl",
            b'{"timestamp": -5, "input_length": 4, "output_length": 1, "hash_ids": [1]}\n',
            ":1: Expected `float` >= 0.0 - at `$.timestamp`",
        ),
        (
            "huge.jsonl",
            b'{"timestamp": 0, "input_length": 4, "output_length": 9223372036854775808, '
            b'"hash_ids": [1]}\n',
            ":1: Expected `int` <= 2147483647 - at `$.output_length`",
        ),
        (
            "bom.jsonl",
            b'\xef\xbb\xbf{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}',
            ":1: starts with a UTF-8 byte-order mark; save without BOM",
        ),
        ("latin1.traj", b'{"history": [{"role": "user", "content": "caf\xe9"}]}', ":1: not UTF-8"),
        ("empty.jsonl", b"", ": no requests"),
        ("header-only.jsonl", _HEADER, ": no requests"),
        ("blank.jsonl", b"\n \n\n", ": no requests"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(
    tmp_path: Path, name: str, data: bytes, reason: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    done = _kvharness("workload", "stats", str(path))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"kvharness workload: error: {path}{reason}")


def test_cli_convert_of_bad_input_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(
        _HEADER + b'{"id": "a", "turns": [{"tokens": 4, "hashes": [1], "output": -1}]}\n'
    )
    out = tmp_path / "out.jsonl"
    done = _kvharness("workload", "convert", str(bad), str(out))
    assert done.returncode == 2
    assert done.stderr == (
        f"kvharness workload: error: {bad}:2: Expected `int` >= 0 - at `$.turns[0].output`\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
