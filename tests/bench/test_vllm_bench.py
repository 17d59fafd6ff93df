"""The bench against a real vLLM-CPU engine serving the tiny model (real HTTP on loopback)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kvharness.bench.config import BenchConfig
from kvharness.bench.run import reset_prefix_cache, run_bench
from kvharness.cli import main
from kvharness.report.metrics import session_times
from kvharness.report.records import read_records
from kvharness.testing import VllmReplica
from kvharness.testing.vllm import free_port
from kvharness.workload.format import save
from kvharness.workload.model import Workload

pytestmark = pytest.mark.vllm


def _real(
    bench_config: Callable[..., BenchConfig], rep: VllmReplica, path: Path, **kw: object
) -> BenchConfig:
    return bench_config([rep.url], path, model=rep.model, scrape_metrics=True, **kw)


def test_cached_tokens_match_the_ideal_and_time_adds_up(
    tmp_path: Path, vllm_replicas: Sequence[VllmReplica],
    agent_workload: Callable[..., Workload], bench_config: Callable[..., BenchConfig],
) -> None:  # fmt: skip
    rep = vllm_replicas[0]
    w = agent_workload(sessions=4, repo_tokens=3000, turns=4, gap=0.3, start_spacing=1.0, seed=11)
    path = tmp_path / "w.jsonl"
    save(w, path)
    assert reset_prefix_cache(rep.url)
    res = run_bench(_real(bench_config, rep, path), tmp_path / "run")
    assert res.failure_line() is None and res.turns_ok == 16
    recs = sorted(res.records, key=lambda r: r.sent)
    warm = recs[1:]  # the very first request meets an empty cache on both sides
    for r in warm:
        assert r.cached_tokens is not None
        assert abs(r.cached_tokens - r.ideal_cached_tokens) <= 0.05 * r.ideal_cached_tokens, r
    assert sum(r.ideal_cached_tokens for r in warm) > 0.7 * sum(r.prompt_tokens for r in warm)
    assert all(r.prompt_tokens == t.input_tokens for r in recs
               for t in [w.sessions[int(r.session[1:])].turns[r.turn]])  # fmt: skip
    delta = res.server[rep.url]
    assert delta["vllm:prefix_cache_hits"] == sum(r.cached_tokens or 0 for r in recs)
    # each session's parts add up to its wall time (lag, queue+prefill, decode, tool gaps)
    times = session_times(res.records, {s.id: len(s) for s in w.sessions})
    assert len(times) == 4 and all(t.completed for t in times)
    for t in times:
        b = t.breakdown
        assert math.isclose(b.total, t.makespan, rel_tol=1e-9, abs_tol=1e-9)
        assert math.isclose(b.tool, 0.3 * 3, abs_tol=1e-6)
        assert b.queue_prefill > 0 and b.decode > 0 and b.lag >= 0


def test_session_and_isolated_modes_side_by_side(
    tmp_path: Path, vllm_replicas: Sequence[VllmReplica],
    agent_workload: Callable[..., Workload], capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    rep = vllm_replicas[0]
    w = agent_workload(
        sessions=4, repos=2, repo_tokens=2500, turns=4, gap=0.2, start_spacing=0.5, seed=12
    )
    path = tmp_path / "w.jsonl"
    save(w, path)
    code = main(["bench", "--backend", rep.url, "--workload", str(path), "--mode", "both",
                 "--out", str(tmp_path / "run"), "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "isolated vs session: mean TTFT" in " ".join(out.split())
    for mode in ("session", "isolated"):
        recs = read_records(tmp_path / "run" / mode / "records.jsonl")
        assert len(recs) == 16 and all(r.ok for r in recs)
        cached = sum(r.cached_tokens or 0 for r in recs)
        ideal = sum(r.ideal_cached_tokens for r in recs)
        assert abs(cached - ideal) <= 0.05 * ideal, mode


def test_killed_server_leaves_records_and_resume_completes(
    tmp_path: Path, vllm_factory: Callable[..., VllmReplica],
    agent_workload: Callable[..., Workload], capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    port, kv_port = free_port(), free_port()
    rep = vllm_factory(port=port, kv_events_port=kv_port)
    w = agent_workload(sessions=3, repo_tokens=2000, turns=6, gap=0.4, start_spacing=0.3, seed=13)
    path = tmp_path / "w.jsonl"
    save(w, path)
    run = tmp_path / "run"
    records = run / "records.jsonl"
    tmp_dir = rep.tmp_dir
    assert tmp_dir is not None
    sockets_before_kill: list[Path] = []

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if records.exists() and len(records.read_bytes().splitlines()) >= 5:
                sockets_before_kill.extend(p for p in tmp_dir.iterdir() if p.is_socket())
                rep.kill()
                return
            time.sleep(0.02)

    th = threading.Thread(target=killer)
    th.start()
    code = main(["bench", "--backend", rep.url, "--workload", str(path), "--out", str(run),
                 "--backoff", "0.05", "--no-progress"])  # fmt: skip
    th.join()
    err = capsys.readouterr().err.strip()
    assert not rep.alive
    # The killed replica's IPC sockets were in its own TMPDIR, and went with it.
    assert sockets_before_kill and not tmp_dir.exists()
    assert code == 2 and len(err.splitlines()) == 1 and "turns failed" in err
    first = read_records(records)
    ok_before = {(r.session, r.turn) for r in first if r.ok}
    assert len(ok_before) >= 5 - 1 and any(not r.ok for r in first)
    assert len(ok_before) < 18
    vllm_factory(port=port, kv_events_port=kv_port)  # the server is back, same address
    code = main(["bench", "--resume", str(run), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    final = read_records(records)
    ok = [(r.session, r.turn) for r in final if r.ok]
    assert len(ok) == len(set(ok)) == 18
    assert final[: len(first)] == first  # the first pass's records are kept as they were


TRACES = Path(__file__).parents[2] / ".." / "shared" / "traces"


def test_real_swe_agent_trace_replays_as_chat(
    tmp_path: Path, vllm_replicas: Sequence[VllmReplica], tiny_model_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    rep = vllm_replicas[0]
    traj = TRACES / "swe-agent" / "ctf__crypto__BabyEncryption.traj"
    code = main(["bench", "--backend", rep.url, "--workload", str(traj), "--tokenizer",
                 str(tiny_model_dir), "--time-scale", "0.01", "--out", str(tmp_path / "run"),
                 "--no-progress"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    recs = sorted(read_records(tmp_path / "run" / "records.jsonl"), key=lambda r: r.turn)
    assert len(recs) >= 3 and all(r.ok for r in recs)
    prompts = [r.prompt_tokens for r in recs]
    assert prompts == sorted(prompts) and prompts[-1] > prompts[0]  # the conversation grows
    later = recs[1:]
    cached = sum(r.cached_tokens or 0 for r in later)
    assert cached > 0.5 * sum(r.prompt_tokens for r in later)  # each call reuses the last
