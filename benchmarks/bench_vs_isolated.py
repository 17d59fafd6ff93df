"""Issue 4's must-shows on a real vLLM-CPU replica (the tiny model, started here):

1. cached tokens vLLM reports per turn vs the ideal computed from the workload (after the first
   request), and each session's time breakdown vs its wall time;
2. the same turns in session mode and in isolated mode (shuffled, no gaps): mean TTFT and cached
   ratio side by side.

    .venv/bin/python benchmarks/bench_vs_isolated.py [--sessions 6] [--turns 5] [--backend URL]

``--backend`` (formerly ``--url``) uses a running vLLM (block size 128) instead of starting one.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from kvharness.bench.config import BenchConfig
from kvharness.bench.run import BenchResult, reset_prefix_cache, run_bench
from kvharness.bench.summary import client_figures
from kvharness.report.metrics import session_times
from kvharness.testing import ReplicaConfig, VllmReplica, ensure_tiny_model, start_replica
from kvharness.testing.workloads import agent_workload
from kvharness.workload.model import Workload

REPO = Path(__file__).resolve().parents[1]


def run(url: str, model: str, w: Workload, mode: str, out: Path) -> BenchResult:
    if not reset_prefix_cache(url):
        print(f"warning: {url} has no /reset_prefix_cache; the {mode} pass starts warm")
    cfg = BenchConfig(backends=(url,), workload="agent", model=model, mode=mode)  # type: ignore[arg-type]
    return run_bench(cfg, out, workload=w)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=6, help="sessions (default 6)")
    ap.add_argument("--repos", type=int, default=2, help="repositories they share (default 2)")
    ap.add_argument("--repo-tokens", type=int, default=3000, help="repository prefix, tokens")
    ap.add_argument("--turns", type=int, default=5, help="turns per session (default 5)")
    ap.add_argument("--gap", type=float, default=0.5, help="tool time between turns, s")
    ap.add_argument(
        "--backend", "--url", dest="backend", default=None, metavar="URL",
        help="a running vLLM instead of starting one",
    )  # fmt: skip
    args = ap.parse_args()
    w = agent_workload(sessions=args.sessions, repos=args.repos, repo_tokens=args.repo_tokens,
                       turns=args.turns, gap=args.gap, start_spacing=0.5, seed=42)  # fmt: skip
    rep: VllmReplica | None = None
    if args.backend is None:
        rep = start_replica(
            ReplicaConfig(model_dir=ensure_tiny_model(REPO / ".cache" / "tiny-llama"))
        )
        url, model = rep.url, rep.model
    else:
        url, model = args.backend.rstrip("/"), ""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            res = {m: run(url, model or "tiny-llama", w, m, Path(tmp) / m)
                   for m in ("session", "isolated")}  # fmt: skip
    finally:
        if rep is not None:
            rep.stop()
    s = res["session"]
    print(f"workload: {args.sessions} sessions x {args.turns} turns, {args.repos} shared "
          f"repositories of {args.repo_tokens} tokens, {args.gap:g} s tool gaps; vLLM-CPU at {url}")  # fmt: skip
    recs = sorted(s.records, key=lambda r: r.sent)[1:]
    dev = [abs((r.cached_tokens or 0) - r.ideal_cached_tokens) / max(1, r.ideal_cached_tokens)
           for r in recs]  # fmt: skip
    cached = sum(r.cached_tokens or 0 for r in recs)
    ideal = sum(r.ideal_cached_tokens for r in recs)
    exact = sum((r.cached_tokens or 0) == r.ideal_cached_tokens for r in recs)
    print(f"1. cached vs ideal, {len(recs)} turns after the first: {exact} exactly equal; worst "
          f"per-turn deviation {max(dev) * 100:.2f}%; total {cached:,} cached vs {ideal:,} ideal "
          f"({(cached / ideal - 1) * 100:+.2f}%)")  # fmt: skip
    times = session_times(s.records, {x.id: len(x) for x in w.sessions})
    worst = max(abs(t.breakdown.total - t.makespan) for t in times)
    b = times[0].breakdown
    print(f"   time breakdown vs wall time over {len(times)} sessions: worst |sum - makespan| = "
          f"{worst * 1e9:.1f} ns; e.g. {times[0].session}: makespan {times[0].makespan:.3f} s = "
          f"lag {b.lag:.3f} + queue+prefill {b.queue_prefill:.3f} + decode {b.decode:.3f} + "
          f"tool {b.tool:.3f}")  # fmt: skip
    q = {m: client_figures(r.records, r.summary) for m, r in res.items()}
    print("2. mode        turns  mean TTFT  p99 TTFT  cached/prompt  ideal/prompt  server hit")
    for m, r in res.items():
        hit = sum(d.get("vllm:prefix_cache_hits", 0) for d in r.server.values())
        qry = sum(d.get("vllm:prefix_cache_queries", 0) for d in r.server.values())
        x = q[m]
        print(f"   {m:<10} {x.turns_ok:>6} {x.ttft.mean * 1e3:>8.1f}ms {x.ttft.p99 * 1e3:>7.1f}ms "  # type: ignore[operator]
              f"{x.cache.achieved_ratio * 100:>13.1f}% {x.cache.ideal_ratio * 100:>12.1f}% "  # type: ignore[operator]
              f"{hit / qry * 100 if qry else 0:>10.1f}%")  # fmt: skip
    a, i = q["session"], q["isolated"]
    print(f"   isolated - session: mean TTFT {(i.ttft.mean - a.ttft.mean) * 1e3:+.1f} ms "  # type: ignore[operator]
          f"({(i.ttft.mean / a.ttft.mean - 1) * 100:+.0f}%), cached ratio "  # type: ignore[operator]
          f"{(i.cache.achieved_ratio - a.cache.achieved_ratio) * 100:+.1f} points")  # type: ignore[operator]  # fmt: skip


if __name__ == "__main__":
    main()
