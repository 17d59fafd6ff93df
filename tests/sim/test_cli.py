"""`kvharness sim` and `kvharness sim calibrate` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvharness.cli import main
from kvharness.engine.cost import CostModel, StepBatch
from kvharness.engine.scheduler import SchedulerConfig
from kvharness.errors import UserError
from kvharness.report.records import read_records
from kvharness.sim import run_default
from kvharness.sim import sweep as sweep_module
from kvharness.sim.cluster import parse_cluster
from kvharness.testing.cli import run_cli

SMALL = "synthetic:sessions=3,steps_median=4,repo_tokens_median=3000"


def test_sim_sweep_writes_table_json_and_run_dirs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(
        [
            "sim",
            "--workload",
            SMALL,
            "--cluster",
            "2xH200:llama-3.1-8b",
            "--policy",
            "round_robin,session",
            "--load",
            "1,2",
            "--replicas",
            "1,2",
            "--out",
            str(out),
            "--executor",
            "serial",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "round_robin" in text and "session" in text and "hit/ideal" in text
    data = json.loads((out / "sim.json").read_text())
    assert len(data["rows"]) == 8
    assert {r["policy"] for r in data["rows"]} == {"round_robin", "session"}
    assert {r["load"] for r in data["rows"]} == {1.0, 2.0}
    run = out / "2xH200_llama-3.1-8b" / "load-2" / "session"
    recs = read_records(run / "records.jsonl")
    assert recs and all(r.ok for r in recs)
    assert (run / "report.html").is_file() and (run / "summary.json").is_file()
    assert (out / "1xH200_llama-3.1-8b" / "load-1" / "report.html").is_file()


def test_sim_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["sim", "--workload", SMALL, "--policy", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
    assert main(["sim", "--workload", SMALL, "--cluster", "3xA100:llama-3.1-8b"]) == 2
    assert "unknown hardware" in capsys.readouterr().err
    assert main(["sim", "--workload", SMALL, "--deadline", "soon"]) == 2
    assert "bad deadline" in capsys.readouterr().err


def test_calibrate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cm = CostModel(parse_cluster("1xH200:llama-3.1-8b").deployment)
    lines = []
    for n, seqs in [(512, 0), (2048, 0), (8192, 0), (0, 8), (0, 64), (0, 256), (1024, 16)]:
        b = StepBatch(n, n * (n + 1) / 2, n, seqs, seqs * 1000)
        lines.append(
            {
                "prefill_tokens": n,
                "decode_seqs": seqs,
                "decode_ctx": seqs * 1000,
                "seconds": cm.step_time(b),
            }
        )
    lines.append(
        {"prompt_tokens": 3000, "cached_tokens": 1000, "output_tokens": 50, "seconds": 0.5}
    )
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "fit.json"
    argv = ["sim", "calibrate", "--samples", str(path), "--cluster", "1xH200:llama-3.1-8b"]
    assert main([*argv, "--out", str(out)]) == 0
    fit = json.loads(out.read_text())
    assert 0 < fit["efficiency"]["compute"] <= 1 and fit["samples"] == 8
    path.write_text('{"seconds": "x"}\n')
    assert main(["sim", "calibrate", "--samples", str(path)]) == 2
    assert "samples.jsonl:1:" in capsys.readouterr().err
    assert main(["sim", "calibrate", "--samples", str(path), str(tmp_path)]) == 2
    assert "not both" in capsys.readouterr().err


def test_run_default_prints_every_policy_at_each_load(
    capsys: pytest.CaptureFixture[str],
) -> None:
    loads = {"light": 0.25, "near saturation": 1.0}
    rows = run_default(
        workload=SMALL, cluster="2xH200:llama-3.1-8b", loads=loads, executor="serial"
    )
    from kvharness.routing.registry import available_policies

    names = available_policies()
    assert [r.policy for r in rows] == names * 2
    assert [r.load for r in rows] == [0.25] * len(names) + [1.0] * len(names)
    assert all(r.turns > 0 and r.errors == 0 for r in rows)
    out = capsys.readouterr().out
    assert out.count("goodput/h") >= 2 and "light, load x0.25" in out
    # One line per load comparing agent_aware with the best of the others, with that figure.
    for level, load in loads.items():
        table = [r for r in rows if r.load == load]
        ours = next(r for r in table if r.policy == "agent_aware")
        best = max((r for r in table if r.policy != "agent_aware"), key=lambda r: r.goodput or 0)
        assert (
            f"{level} (load x{load:g}): agent_aware {ours.goodput:.1f} sessions/h within the "
            f"deadline against {best.goodput:.1f} for the best other policy, {best.policy}"
        ) in " ".join(out.split())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-num-seqs", "0"], "argument --max-num-seqs: expected an integer >= 1, got '0'"),
        (["--block-size", "0"], "argument --block-size: expected an integer >= 1"),
        (["--max-num-batched-tokens", "-5"], "argument --max-num-batched-tokens: expected"),
        (["--cpu-tier-blocks", "-1"], "argument --cpu-tier-blocks: expected an integer >= 0"),
        (["--jobs", "0"], "argument --jobs: expected an integer >= 1"),
        (["--replicas", "0,2"], "argument --replicas: expected whole numbers >= 1"),
        (["--load", "inf"], "argument --load: expected positive numbers"),
    ],
)
def test_sim_numbers_are_checked_at_parse_time(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["sim", "--workload", SMALL, "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "FILE"], "--out FILE: {tmp}/FILE is a file, not a folder"),
        (["--out", "FILE/sub"], "--out FILE/sub: {tmp}/FILE is a file, not a folder"),
        (["--out", "/sys/kvharness-sim"], "--out /sys/kvharness-sim: cannot write in /sys"),
        (["--workload", "synthetic:sessions=100000000"], "sessions must be in [1, 100000]"),
        (["--workload", "missing.jsonl"], "--workload missing.jsonl: no such file or folder"),
    ],
)
def test_sim_refuses_before_simulating(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("x")
    started: list[object] = []
    monkeypatch.setattr(sweep_module, "run_sweep", lambda *a, **kw: started.append(a) or [])
    base = ["sim", "--workload", SMALL, "--policy", "round_robin", "--executor", "serial"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message.format(tmp=tmp_path) in err, err
    assert started == [] and sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]


def test_block_size_zero_is_not_the_default() -> None:
    with pytest.raises(UserError, match="block_size must be >= 1 token"):
        parse_cluster("1xH200:llama-3.1-8b", block_size=0)
    with pytest.raises(ValueError, match="max_num_seqs must be >= 1"):
        SchedulerConfig(max_num_seqs=0)


def test_calibrate_checks_out_before_fitting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "missing" / "fit.json"
    samples = str(tmp_path / "no-samples.jsonl")
    assert main(["sim", "calibrate", "--samples", samples, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"kvharness sim: error: --out {out}: the folder {out.parent} does not exist"


def test_sim_attention_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["sim", "--workload", SMALL, "--policy", "round_robin", "--executor", "serial"]
    assert main([*base, "--attention", "cascade", "--out", str(tmp_path / "c")]) == 0
    rows = json.loads((tmp_path / "c" / "sim.json").read_text())["rows"]
    assert [r["attention"] for r in rows] == ["cascade"]
    assert rows[0]["decode_step_p50"] > 0 and rows[0]["shared_prefix_share"] is not None
    run = tmp_path / "c" / "16xH200_llama-3.3-70b" / "load-1" / "round_robin"
    assert json.loads((run / "config.json").read_text())["attention"] == "cascade"
    capsys.readouterr()
    assert run_cli([*base, "--attention", "flash", "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "argument --attention: invalid choice: 'flash' (choose from" in err, err
    assert not (tmp_path / "f").exists()
    assert run_cli(["sim", "--help"]) == 0
    assert "cascade = shared-prefix (cascade) decode attention" in " ".join(
        capsys.readouterr().out.split()
    )
