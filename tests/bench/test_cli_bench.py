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
        (["--backend", "localhost:8000"], "is not an http(s):// URL"),
        (["--backend", "http://x", "--rate", "0"], "argument --rate: expected a number > 0, got '0'"),
        (["--backend", "http://x", "--rate", "nan"], "argument --rate: expected a number > 0"),
        (["--backend", "http://x", "--max-attempts", "0"],
         "argument --max-attempts: expected an integer >= 1 and <= 1000, got '0'"),
        (["--backend", "http://x", "--engine-block-size", "0"],
         "argument --engine-block-size: expected an integer >= 1"),
        (["--backend", "http://x", "--timeout", "-1"], "argument --timeout: expected a number > 0"),
        (["--backend", "http://x", "--backoff", "-1"], "argument --backoff: expected a number >= 0"),
        (["--backend", "http://x", "--concurrency", "0"], "argument --concurrency: expected"),
        (["--backend", "http://x", "--max-sessions", "0"], "argument --max-sessions: expected"),
        (["--backend", "http://127.0.0.1:9", "--workload", "/nonexistent.jsonl", "--model", "m"],
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
    argv = ["bench", "--backend", fake.url, "--workload", str(agent_workload_file),
            "--model", "stub", "--no-metrics", "--out", str(out(tmp_path))]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("kvharness bench: error: --out ")
    assert message in err
    assert fake.stats.requests == 0


def _bench(fake: FakeOpenAI, workload: Path, run: Path) -> list[str]:
    return ["bench", "--backend", fake.url, "--workload", str(workload), "--model", "stub",
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
    for opt in ("--backend", "--workload", "--mode", "--resume", "--rate", "--concurrency",
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


OLD_CONFIG = (
    '{"targets":["URL"],"workload":"W","mode":"session","model":"stub","arrival":"workload",'
    '"rate":1.0,"concurrency":0,"time_scale":1.0,"vocab_size":1024,"engine_block_size":128,'
    '"workload_block_size":512,"tokenizer":null,"prompt_format":"tokens",'
    '"session_header":"x-session-id","ignore_eos":true,"max_sessions":null,"seed":0,'
    '"retry":{"max_attempts":3,"backoff":0.01,"timeout":30.0,"connect_timeout":4.0},'
    '"scrape_metrics":false,"event_loop":"auto","client":"fast","label":"session",'
    '"started_at":1700000000.0}'
)
"""config.json as the version before the renames wrote it (targets, backoff, timeout...)."""


def test_a_config_written_before_the_renames_loads(tmp_path: Path) -> None:
    from kvharness.bench.config import BenchConfig, RetryPolicy
    from kvharness.bench.run import load_config

    (tmp_path / "config.json").write_text(OLD_CONFIG.replace("URL", "http://127.0.0.1:9"))
    assert load_config(tmp_path) == BenchConfig(
        backends=("http://127.0.0.1:9",), workload="W", model="stub", scrape_metrics=False,
        label="session", started_at=1700000000.0,
        retry=RetryPolicy(backoff_s=0.01, timeout_s=30.0, connect_timeout_s=4.0),
    )  # fmt: skip


def test_a_run_written_before_the_renames_resumes(
    tmp_path: Path, fake: FakeOpenAI, agent_workload_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    run = tmp_path / "run"
    assert main(_bench(fake, agent_workload_file, run)) == 0
    records = run / "records.jsonl"
    lines = records.read_bytes().splitlines(keepends=True)
    records.write_bytes(b"".join(lines[:-2]))
    started = json.loads((run / "config.json").read_text())["started_at"]
    old = OLD_CONFIG.replace("URL", fake.url).replace('"W"', json.dumps(str(agent_workload_file)))
    (run / "config.json").write_text(old.replace("1700000000.0", repr(started)))
    before = fake.stats.requests
    assert main(["bench", "--resume", str(run), "--no-progress"]) == 0
    assert fake.stats.requests - before == 2
    assert len(read_run_records(records)) == len(lines)


def test_options_build_the_config_they_name() -> None:
    from kvharness.bench.config import BenchConfig, RetryPolicy
    from kvharness.cli import build_parser
    from kvharness.cli._bench import _config

    def config(*argv: str) -> BenchConfig:
        cfg: BenchConfig = _config(build_parser().parse_args(["bench", *argv]))
        return cfg

    assert config("--backend", "http://a/") == BenchConfig(backends=("http://a",))
    assert config("--target", "http://a", "--target", "https://b") == BenchConfig(
        backends=("http://a", "https://b")
    )
    full = config(
        "--backend", "http://a", "-w", "synthetic:sessions=2", "--model", "m", "--rate", "2",
        "--time-scale", "0.5", "--max-sessions", "3", "--vocab-size", "512",
        "--engine-block-size", "16", "--workload-block-size", "64", "--tokenizer", "tok",
        "--prompt-format", "text", "--no-session-header", "--no-ignore-eos", "--seed", "7",
        "--max-attempts", "2", "--backoff", "0", "--timeout", "9", "--connect-timeout", "1",
        "--no-metrics", "--event-loop", "asyncio", "--label", "L",
    )  # fmt: skip
    assert full == BenchConfig(
        backends=("http://a",), workload="synthetic:sessions=2", model="m", arrival="poisson",
        rate=2.0, time_scale=0.5, max_sessions=3, vocab_size=512, engine_block_size=16,
        workload_block_size=64, tokenizer="tok", prompt_format="text", session_header=None,
        ignore_eos=False, seed=7, scrape_metrics=False, event_loop="asyncio",
        label="L", retry=RetryPolicy(max_attempts=2, backoff_s=0.0, timeout_s=9.0,
                                     connect_timeout_s=1.0),
    )  # fmt: skip
    conc = config("--backend", "http://a", "--concurrency", "4")
    assert (conc.arrival, conc.concurrency) == ("concurrent", 4)
    iso = config("--backend", "http://a", "--concurrency", "4", "--mode", "isolated")
    assert (iso.arrival, iso.concurrency) == ("workload", 4)
    assert config("--backend", "http://a", "--trace-times").arrival == "trace"


def test_help_gives_each_fields_help_and_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from kvharness.bench.config import BenchConfig, RetryPolicy
    from kvharness.configs import option

    monkeypatch.setenv("COLUMNS", "10000")
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for cls in (BenchConfig, RetryPolicy):
        for f in dataclasses.fields(cls):
            o = option(f)
            if o is not None and f.name != "arrival":  # arrival: --rate, --concurrency...
                assert " ".join(o.help.split()) in text, f.name
    for shown in ("--timeout S seconds one attempt may take, from send to its last byte "
                  "(default: 300)", "--backoff S", "--connect-timeout S", "(default: 1024)",
                  "--backend URL, --target URL", "(default: synthetic)"):  # fmt: skip
        assert shown in text, shown
