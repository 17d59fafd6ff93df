from __future__ import annotations

import json
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
    assert direct == converted


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 1, "input_length": 4}\n')
    assert main(["workload", "stats", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{bad}:1:" in err and "missing required field" in err
