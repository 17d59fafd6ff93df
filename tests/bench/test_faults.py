"""Faults against a real HTTP peer on loopback that misbehaves on purpose (the fake server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kvharness.bench.config import BenchConfig
from kvharness.bench.run import run_bench
from kvharness.cli import main
from kvharness.testing.fake_openai import FakeOpenAI
from kvharness.testing.vllm import free_port
from kvharness.workload.format import save
from kvharness.workload.model import Workload


@pytest.fixture
def two_sessions(
    tmp_path: Path, agent_workload: Callable[..., Workload], first_ids: Callable[..., bytes]
) -> tuple[Path, bytes]:
    """Two sessions on different repositories, 3 turns each; returns (file, marker of s0)."""
    w = agent_workload(sessions=2, repos=2, repo_tokens=300, turns=3, gap=0.01, start_spacing=0)
    path = tmp_path / "w.jsonl"
    save(w, path)
    return path, first_ids(w, 0)


def test_refused_connection_is_retried_then_abandons(
    two_sessions: tuple[Path, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = two_sessions
    target = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code = main(["bench", "--backend", target, "--workload", str(path), "--model", "m",
                 "--out", str(tmp_path / "run"), "--backoff", "0.01", "--no-metrics"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "6 of 6 turns failed (connection refused: 6)" in err
    from kvharness.report.records import read_records

    recs = read_records(tmp_path / "run" / "records.jsonl")
    assert sorted((r.session, r.turn, r.attempt) for r in recs) == [
        (s, 0, a) for s in ("s0", "s1") for a in range(3)
    ]
    assert all(r.error and r.error.startswith("connection refused") for r in recs)


def test_5xx_is_retried_and_the_turn_succeeds(
    two_sessions: tuple[Path, bytes],
    bench_config: Callable[..., BenchConfig],
    tmp_path: Path,
    fake: FakeOpenAI,
) -> None:
    path, marker = two_sessions
    fake.plan = lambda n, body: "http 503" if marker in body and fake.stats.faults == {} else None
    res = run_bench(bench_config([fake.url], path), tmp_path / "run")
    assert res.failure_line() is None and res.turns_ok == 6
    bad = [r for r in res.records if not r.ok]
    assert [(r.session, r.turn, r.attempt) for r in bad] == [("s0", 0, 0)]
    assert bad[0].error is not None and bad[0].error.startswith("http 503: ")
    retried = [r for r in res.records if (r.session, r.turn, r.attempt) == ("s0", 0, 1)]
    assert len(retried) == 1 and retried[0].ok
    assert retried[0].intended >= bad[0].sent + 0.01  # backed off before resending


def test_4xx_abandons_the_session_at_once_and_the_run_goes_on(
    two_sessions: tuple[Path, bytes],
    bench_config: Callable[..., BenchConfig],
    tmp_path: Path,
    fake: FakeOpenAI,
) -> None:
    path, marker = two_sessions
    seen: list[int] = []

    def plan(n: int, body: bytes) -> str | None:
        if marker in body:
            seen.append(n)
            return "http 400" if len(seen) == 2 else None  # s0's second turn
        return None

    fake.plan = plan
    res = run_bench(bench_config([fake.url], path), tmp_path / "run")
    s0 = sorted((r.turn, r.attempt, r.error is None) for r in res.records if r.session == "s0")
    assert s0 == [(0, 0, True), (1, 0, False)]  # no retry, turn 2 never sent
    assert sum(r.ok for r in res.records if r.session == "s1") == 3
    assert res.errors == {"http 400": 1}
    assert res.failure_line() is not None and "2 of 6 turns failed" in (res.failure_line() or "")


def test_stream_cut_after_first_token_abandons_without_retry(
    two_sessions: tuple[Path, bytes],
    bench_config: Callable[..., BenchConfig],
    tmp_path: Path,
    fake: FakeOpenAI,
) -> None:
    path, marker = two_sessions
    fake.plan = lambda n, body: "cut" if marker in body else None
    res = run_bench(bench_config([fake.url], path), tmp_path / "run")
    s0 = [r for r in res.records if r.session == "s0"]
    assert len(s0) == 1
    cut = s0[0]
    assert cut.first_token is not None and cut.done is None
    assert cut.error is not None and cut.error.startswith("stream cut")
    assert res.turns_ok == 3


@pytest.mark.parametrize("fault", ["hang", "close"])
def test_no_answer_before_first_token_is_retried(
    two_sessions: tuple[Path, bytes],
    bench_config: Callable[..., BenchConfig],
    tmp_path: Path,
    fake: FakeOpenAI,
    fault: str,
) -> None:
    path, marker = two_sessions
    fake.plan = lambda n, body: fault if marker in body and not fake.stats.faults else None
    res = run_bench(bench_config([fake.url], path, timeout_s=0.5), tmp_path / "run")
    bad = [r for r in res.records if not r.ok]
    assert len(bad) == 1 and bad[0].first_token is None
    assert bad[0].error is not None
    assert bad[0].error.startswith("timeout" if fault == "hang" else ("stream cut", "connection"))
    assert res.turns_ok == 6 and res.failure_line() is None
