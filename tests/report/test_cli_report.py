"""`kvharness report show` and `kvharness report compare` on run directories in tmp dirs."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from kvharness.cli import main
from kvharness.report.io import write_run_report
from kvharness.report.records import TurnRecord


@pytest.fixture
def two_runs(tmp_path: Path, records: list[TurnRecord]) -> tuple[Path, Path]:
    faster = [
        msgspec.structs.replace(r, first_token=r.first_token - 0.25)
        if r.ok and r.first_token is not None else r
        for r in records
    ]  # fmt: skip
    a = tmp_path / "week-1"
    b = tmp_path / "week-2"
    write_run_report(a, records, {"policy": "round_robin"}, deadline=10.0)
    write_run_report(b, faster, {"policy": "agent_aware"}, deadline=10.0)
    return a, b


def test_show_table(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "show", str(two_runs[0])]) == 0
    out = capsys.readouterr().out
    assert "run: week-1" in out and "300.0/h" in out and "errors: http 503" in out


def test_show_json_and_html(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "out.html"
    assert main(["report", "show", str(two_runs[0]), "--json", "--html", str(html)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["label"], data["deadline"], data["sessions_within_deadline"]) == (
        "week-1",
        10.0,
        1,
    )
    assert data["goodput"] == pytest.approx(300.0)
    assert 'id="plot-ttft-cdf"' in html.read_text()
    # --deadline overrides the recorded one: 12 s lets session a (12 s) count too.
    assert main(["report", "show", str(two_runs[0]), "--json", "--deadline", "12"]) == 0
    assert json.loads(capsys.readouterr().out)["goodput"] == pytest.approx(600.0)


def test_relative_deadline_from_lower_bounds(
    tmp_path: Path, records: list[TurnRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    # As the simulator writes it: deadline 1.5x each session's lower bound (a 8 s, b 3 s):
    # a may take 12 s and took 12 -> in; b may take 4.5 s and took 5.5 -> out. 1 / (12/3600 h).
    run = tmp_path / "sim"
    write_run_report(run, records, {"deadline": "1.5x", "lower_bounds": {"a": 8.0, "b": 3.0}})
    assert main(["report", "show", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["deadline"], data["deadline_rule"]) == (None, "1.5x lower bound")
    assert data["sessions_within_deadline"] == 1 and data["goodput"] == pytest.approx(300.0)
    # 2x: b may take 6 s -> both in.
    assert main(["report", "show", str(run), "--json", "--deadline", "2x"]) == 0
    assert json.loads(capsys.readouterr().out)["goodput"] == pytest.approx(600.0)
    assert main(["report", "show", str(run)]) == 0
    assert "completed within deadline (1.5x lower bound)" in capsys.readouterr().out


def test_compare_table(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "compare", *map(str, two_runs)]) == 0
    out = capsys.readouterr().out
    ttft = next(line for line in out.splitlines() if "TTFT p50" in line)
    assert "1.00 s" in ttft and "750.0 ms ↓25.0% better" in ttft
    assert "= same" in next(line for line in out.splitlines() if "goodput" in line)


def test_compare_json_html_and_baseline(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "cmp.html"
    args = ["report", "compare", *map(str, two_runs), "--json", "--baseline", "1"]
    assert main([*args, "--html", str(html)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["labels"] == ["week-1", "week-2"] and data["baseline"] == 1
    ttft = next(m for m in data["metrics"] if m["key"] == "ttft_p50")
    assert ttft["values"] == [1.0, 0.75] and ttft["verdict"] == ["worse", "baseline"]
    assert ttft["pct"][0] == pytest.approx(100 / 3)
    assert html.read_text().count('<svg class="plot"') == 8


def test_compare_rows_and_same_names(
    tmp_path: Path, records: list[TurnRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "x" / "run", tmp_path / "y" / "run"
    write_run_report(a, records, {})
    write_run_report(b, records, {})
    assert main(["report", "compare", str(a), str(b), "--rows"]) == 0
    out = capsys.readouterr().out
    assert "│ 0:run" in out and "│ 1:run" in out


def test_compare_refuses_different_deadlines(
    tmp_path: Path, records: list[TurnRecord], capsys: pytest.CaptureFixture[str]
) -> None:
    write_run_report(tmp_path / "a", records, {}, deadline=10.0)
    write_run_report(tmp_path / "b", records, {}, deadline=20.0)
    args = ["report", "compare", str(tmp_path / "a"), str(tmp_path / "b")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "runs have different deadlines (a: 10, b: 20); pass --deadline" in err
    assert main([*args, "--deadline", "15"]) == 0


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "no such run directory"),
        ("empty", "not a run directory (no records.jsonl)"),
        ("badline", "records.jsonl:2: bad record:"),
    ],
)
def test_errors_are_one_line(
    tmp_path: Path, records: list[TurnRecord], capsys: pytest.CaptureFixture[str],
    setup: str, message: str,
) -> None:  # fmt: skip
    run = tmp_path / "run"
    if setup != "missing":
        run.mkdir()
    if setup == "badline":
        (run / "records.jsonl").write_bytes(msgspec.json.encode(records[0]) + b'\n{"turn": "x"}\n')
    for argv in (["report", "show", str(run)], ["report", "compare", str(run)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
        assert err.startswith("kvharness report: error: ")


def test_bad_options(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "show", str(two_runs[0]), "--deadline", "0"]) == 2
    assert "--deadline: deadline must be > 0, got '0'" in capsys.readouterr().err
    assert main(["report", "show", str(two_runs[0]), "--deadline", "soon"]) == 2
    assert "--deadline: bad deadline 'soon'" in capsys.readouterr().err
    # A factor needs the sessions' lower bounds, which this (bench-like) run does not have.
    assert main(["report", "show", str(two_runs[0]), "--deadline", "1.5x"]) == 2
    assert 'needs each session\'s lower bound ("lower_bounds" in config.json)' in (
        capsys.readouterr().err
    )
    assert main(["report", "compare", str(two_runs[0]), "--baseline", "3"]) == 2
    assert "--baseline 3: give 0..0" in capsys.readouterr().err
    assert (
        main(["report", "show", str(two_runs[0]), "--html", str(two_runs[0] / "no" / "x.html")])
        == 2
    )
    assert "--html " in (err := capsys.readouterr().err) and "No such file or directory" in err
    assert main(["report"]) == 2
    assert "show" in capsys.readouterr().out


def test_help_on_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    for sub in ("show", "compare"):
        with pytest.raises(SystemExit):
            main(["report", sub, "--help"])
        out = capsys.readouterr().out
        for opt in ("--json", "--html", "--deadline"):
            assert opt in out
