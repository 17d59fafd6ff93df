"""Session pacing, arrivals, isolated mode and resume, against the fake server on loopback."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from kvharness.bench.config import BenchConfig
from kvharness.bench.run import run_bench
from kvharness.report.records import TurnRecord
from kvharness.testing.fake_openai import FakeOpenAI
from kvharness.workload.format import save
from kvharness.workload.ideal import IdealCache, engine_cached_tokens
from kvharness.workload.model import Workload


def _save(w: Workload, tmp_path: Path) -> Path:
    path = tmp_path / "w.jsonl"
    save(w, path)
    return path


def _by_session(records: list[TurnRecord]) -> dict[str, list[TurnRecord]]:
    out: dict[str, list[TurnRecord]] = {}
    for r in sorted(records, key=lambda r: (r.session, r.turn, r.attempt)):
        out.setdefault(r.session, []).append(r)
    return out


def test_closed_loop_gaps_and_breakdown_add_up(
    tmp_path: Path, fake: FakeOpenAI, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig],
) -> None:  # fmt: skip
    w = agent_workload(sessions=3, turns=4, repo_tokens=400, gap=0.05, start_spacing=0.1)
    res = run_bench(bench_config([fake.url], _save(w, tmp_path)), tmp_path / "run")
    assert res.turns_ok == 12 and len(res.records) == 12
    for sid, recs in _by_session(res.records).items():
        starts = [r.intended for r in recs]
        assert recs[0].intended >= 0
        for prev, cur in itertools.pairwise(recs):
            assert prev.done is not None
            assert math.isclose(cur.intended, prev.done + cur.gap, abs_tol=1e-9), sid
        for r in recs:
            assert r.intended <= r.sent <= (r.first_token or 0) <= (r.done or 0)
        # lag + TTFT + decode + gaps telescopes to the session's wall time
        parts = sum((r.sent - r.intended) + (r.first_token or 0) - r.sent
                    + (r.done or 0) - (r.first_token or 0) for r in recs)  # fmt: skip
        parts += sum(r.gap for r in recs[1:])
        assert math.isclose(parts, (recs[-1].done or 0) - starts[0], abs_tol=1e-9)
    # sessions started 0.1 s apart, on the workload's own trace times
    firsts = sorted(recs[0].intended for recs in _by_session(res.records).values())
    assert all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(firsts))


def test_ideal_cached_tokens_follow_the_send_order(
    tmp_path: Path, fake: FakeOpenAI, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig],
) -> None:  # fmt: skip
    w = agent_workload(sessions=2, turns=3, repo_tokens=1000, gap=0.01, start_spacing=0.5)
    res = run_bench(bench_config([fake.url], _save(w, tmp_path)), tmp_path / "run")
    ideal = IdealCache()
    chains = {(s.id, i): t.input for s in w.sessions for i, t in enumerate(s.turns)}
    for r in sorted(res.records, key=lambda r: r.sent):
        chain = chains[(r.session, r.turn)]
        want = engine_cached_tokens(ideal.visit(chain).tokens, chain.num_tokens, 128)
        assert r.ideal_cached_tokens == want
    assert res.records[0].ideal_cached_tokens == 0
    assert max(r.ideal_cached_tokens for r in res.records) > 1000


def test_concurrency_one_runs_sessions_back_to_back(
    tmp_path: Path, fake: FakeOpenAI, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig],
) -> None:  # fmt: skip
    w = agent_workload(sessions=3, turns=2, repo_tokens=200, gap=0.01, start_spacing=5.0)
    cfg = bench_config([fake.url], _save(w, tmp_path), arrival="concurrent", concurrency=1)
    res = run_bench(cfg, tmp_path / "run")
    spans = sorted(
        (recs[0].intended, recs[-1].done or 0) for recs in _by_session(res.records).values()
    )
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end
    assert spans[-1][0] < 5.0  # the trace's 5 s spacing was not used


def test_isolated_mode_sends_every_turn_once_shuffled_without_gaps(
    tmp_path: Path, fake: FakeOpenAI, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig],
) -> None:  # fmt: skip
    w = agent_workload(sessions=4, turns=4, repo_tokens=200, gap=10.0, start_spacing=0)
    cfg = bench_config([fake.url], _save(w, tmp_path), mode="isolated", concurrency=1)
    res = run_bench(cfg, tmp_path / "run")
    order = [(r.session, r.turn) for r in sorted(res.records, key=lambda r: r.sent)]
    assert sorted(order) == sorted((s.id, i) for s in w.sessions for i in range(4))
    assert order != sorted(order, key=lambda k: (k[1], k[0]))  # not in session order
    span = max(r.done or 0 for r in res.records) - min(r.intended for r in res.records)
    assert span < 10.0  # no 10 s gaps honoured


def test_resume_skips_finished_turns_and_restarts_at_the_first_unfinished(
    tmp_path: Path, fake: FakeOpenAI, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig], first_ids: Callable[..., bytes],
) -> None:  # fmt: skip
    w = agent_workload(sessions=2, repos=2, turns=4, repo_tokens=300, gap=0.01, start_spacing=0)
    marker = first_ids(w, 1)
    hits: list[int] = []

    def plan(n: int, body: bytes) -> str | None:
        if marker in body:
            hits.append(n)
            return "http 400" if len(hits) == 3 else None  # s1 fails at turn 2
        return None

    fake.plan = plan
    cfg = bench_config([fake.url], _save(w, tmp_path))
    first = run_bench(cfg, tmp_path / "run")
    assert first.turns_ok == 6 and first.failure_line() is not None
    fake.plan = None
    before = fake.stats.requests
    second = run_bench(cfg, tmp_path / "run", resume=True)
    assert fake.stats.requests - before == 2  # s1's turns 2 and 3 only
    assert second.turns_ok == 8 and second.failure_line() is None
    ok = [(r.session, r.turn) for r in second.records if r.ok]
    assert len(ok) == len(set(ok)) == 8
    resumed = [r for r in second.records if r.session == "s1" and r.turn >= 2 and r.ok]
    failed = [r for r in second.records if not r.ok]
    assert min(r.sent for r in resumed) > max(r.sent for r in failed)  # one clock across passes


def test_progress_bar_shows_live_counts(
    tmp_path: Path, fake: FakeOpenAI, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig], capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    w = agent_workload(sessions=2, turns=2, repo_tokens=200, gap=0.01, start_spacing=0)
    run_bench(bench_config([fake.url], _save(w, tmp_path)), tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    assert "4/4" in err and "2 done" in err and "errors 0" in err, err


def test_sessions_go_round_robin_over_targets(
    tmp_path: Path, fake: FakeOpenAI, agent_workload: Callable[..., Workload],
    bench_config: Callable[..., BenchConfig],
) -> None:  # fmt: skip
    w = agent_workload(sessions=4, turns=3, repo_tokens=200, gap=0.01, start_spacing=0.05)
    with FakeOpenAI() as other:
        res = run_bench(bench_config([fake.url, other.url], _save(w, tmp_path)), tmp_path / "run")
        assert other.stats.requests == 6
    assert fake.stats.requests == 6
    by_session = {r.session: r.replica for r in res.records}
    assert all(r.replica == by_session[r.session] for r in res.records)  # one target per session
    assert [by_session[f"s{i}"] for i in range(4)] == [fake.url, other.url] * 2
