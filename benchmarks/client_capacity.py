"""How many concurrent agent sessions one client core drives (issue 4's capacity must-show).

Setup: the fake OpenAI-compatible server (``kvharness.testing.fake_openai``: answers at once with 8
streamed tokens) runs in its own process pinned to one CPU; this process, the bench client, is
pinned to another. Each session sends prompts of about 1,000 tokens growing by 100 each turn, with
1 s think time between turns; sessions start spread evenly over the first second. For a ladder of
session counts it prints send lag (p50/p99) and TTFT (p50/p99), and finds the largest count whose
send lag p99 stays under 5 ms and whose TTFT p99 stays within 5 ms of the single-session floor.

    .venv/bin/python benchmarks/client_capacity.py [--sessions 1,500,1000,2000,3000] [--turns 6]

Peers (``--peers``): NVIDIA AIPerf and GuideLLM, if installed in ``.cache/peers-venv``, are run
against the same fake at the same per-session load and their figures printed beside ours.

Before and after (``--compare SRC``): each rung is run by this tree's bench and by the kvharness
in the folder SRC (its ``benchmarks/client_capacity.py`` beside it, e.g. a ``git worktree`` of an
earlier commit), in turn, each in a fresh process pinned to the client CPU, against the same fake
server; both rows and the ratio of their CPU per request are printed, then each side's verdict.

    .venv/bin/python benchmarks/client_capacity.py --compare /tmp/before/src
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from kvharness.bench.config import BenchConfig, RetryPolicy
from kvharness.bench.run import run_bench
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.model import Arrival, Session, Turn, Workload

REPO = Path(__file__).resolve().parents[1]


def workload(n: int, turns: int, think: float, prompt: int = 1000, growth: int = 100) -> Workload:
    sessions = []
    for i in range(n):
        b = ChainBuilder(128)
        b.extend_segment(1_000_000 + i, prompt)
        ts = []
        for t in range(turns):
            ts.append(Turn(b.chain(), 8, gap=0.0 if t == 0 else think))
            b.extend_segment(2_000_000 + i * 1000 + t, growth)
        sessions.append(Session(f"s{i}", tuple(ts), start=i / max(n, 1)))
    return Workload(tuple(sessions), 128, name=f"capacity-{n}", arrival=Arrival("trace"))


def start_fake(cpu: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvharness.testing.fake_openai", "--tokens", "8", "--cpu", str(cpu)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}"


def measure(url: str, n: int, turns: int, think: float, out: Path) -> dict[str, float]:
    cfg = BenchConfig(
        backends=(url,), workload=f"capacity:{n}", model="stub", scrape_metrics=False,
        retry=RetryPolicy(max_attempts=1, timeout_s=60.0),
    )  # fmt: skip
    t0 = time.perf_counter()
    res = run_bench(cfg, out, workload=workload(n, turns, think))
    wall = time.perf_counter() - t0
    ok = [r for r in res.records if r.ok]
    lag = np.array([r.sent - r.intended for r in res.records])
    ttft = np.array([r.first_token - r.sent for r in ok if r.first_token is not None])
    span = max(r.done or 0 for r in ok) - min(r.intended for r in res.records)
    return {
        "sessions": n,
        "turns_ok": len(ok),
        "failed": len(res.records) - len(ok),
        "req_per_s": len(ok) / span,
        "lag_p50_ms": float(np.percentile(lag, 50)) * 1e3,
        "lag_p99_ms": float(np.percentile(lag, 99)) * 1e3,
        "ttft_p50_ms": float(np.percentile(ttft, 50)) * 1e3,
        "ttft_p99_ms": float(np.percentile(ttft, 99)) * 1e3,
        "wall_s": wall,
        "cpu_us_per_req": res.client_cpu_s / max(1, res.attempts_last_pass) * 1e6,
        "cpu_s": res.client_cpu_s,
    }


_MEASURE = """import json, pathlib, sys
sys.path.insert(0, sys.argv[1])
import client_capacity as cc
m = cc.measure(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
               pathlib.Path(sys.argv[6]))
print(json.dumps(m))
"""


def measure_with(
    src: Path, url: str, n: int, turns: int, think: float, out: Path, cpu: int
) -> dict[str, float]:
    """:func:`measure` as the kvharness in ``src`` does it (with its own ``client_capacity.py``
    from the ``benchmarks`` folder beside ``src``), in a fresh process pinned to ``cpu``."""
    args = [str(src.parent / "benchmarks"), url, str(n), str(turns), str(think), str(out)]
    done = subprocess.run(
        ["taskset", "-c", str(cpu), sys.executable, "-c", _MEASURE, *args],
        env={**os.environ, "PYTHONPATH": str(src)}, cwd=out.parent,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the bench in {src} failed:\n{done.stderr[-2000:]}")
    values: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return values


def _row(label: str, n: int, m: dict[str, float], good: bool) -> str:
    return (f"{label:<6} {n:>8} {m['turns_ok']:>7.0f} {m['failed']:>5.0f} {m['req_per_s']:>7.0f} "
            f"{m['lag_p50_ms']:>6.2f}ms {m['lag_p99_ms']:>6.2f}ms "
            f"{m['ttft_p50_ms']:>7.2f}ms {m['ttft_p99_ms']:>7.2f}ms "
            f"{m['cpu_us_per_req']:>6.0f}us  {'ok' if good else 'over'}")  # fmt: skip


def compare(url: str, other: Path, counts: list[int], turns: int, think: float, cpu: int) -> None:
    """Each rung by this tree's bench and by the one in ``other``, alternating which goes first."""
    sides = {"this": REPO / "src", "other": other.resolve()}
    floors: dict[str, float] = {}
    best = dict.fromkeys(sides, 0)
    print(f"{'side':<6} {'sessions':>8} {'ok':>7} {'fail':>5} {'req/s':>7} {'lag p50':>8} "
          f"{'lag p99':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'CPU/req':>8}  verdict")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for i, n in enumerate(counts):
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            got = {}
            for side in order:
                m = measure_with(sides[side], url, n, turns, think, Path(tmp) / f"{side}{i}", cpu)
                floors.setdefault(side, m["ttft_p99_ms"])
                good = (m["failed"] == 0 and m["lag_p99_ms"] < 5.0
                        and m["ttft_p99_ms"] <= floors[side] + 5.0)  # fmt: skip
                if good:
                    best[side] = max(best[side], n)
                got[side] = m
                print(_row(side, n, m, good), flush=True)
            ratio = got["this"]["cpu_us_per_req"] / got["other"]["cpu_us_per_req"]
            print(f"{'':<6} {n:>8} CPU per request this/other: {ratio:.3f}", flush=True)
    for side, src in sides.items():
        print(f"{side} ({src}): {best[side]} concurrent sessions on one core within send lag "
              f"p99 < 5 ms and TTFT p99 <= floor ({floors[side]:.2f} ms) + 5 ms")  # fmt: skip


PEERS = REPO / ".cache" / "peers-venv" / "bin"
TOKENIZER = REPO / ".cache" / "tiny-llama"  # AIPerf and GuideLLM need one; the tiny model's


def _child_cpu(cmd: list[str], cwd: Path | None = None) -> float:
    """Run a peer to completion; the CPU seconds it and its children used (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, capture_output=True, timeout=900, check=False, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_aiperf(
    url: str, n: int, turns: int, think: float, cpu: int, out: Path
) -> tuple[str, float, int]:
    """AIPerf 0.13: n multi-turn chat conversations at concurrency n, think time between turns."""
    cmd = [
        "taskset", "-c", str(cpu), str(PEERS / "aiperf"), "profile", "--model", "stub",
        "--url", url, "--endpoint-type", "chat", "--streaming", "--tokenizer", str(TOKENIZER),
        "--concurrency", str(n), "--conversation-num", str(n),
        "--conversation-turn-mean", str(turns), "--conversation-turn-stddev", "0",
        "--conversation-turn-delay-mean", str(int(think * 1000)), "--isl", "1000", "--osl", "8",
        "--ui-type", "none", "--output-artifact-dir", str(out), "--no-server-metrics",
        "--no-gpu-telemetry",
    ]  # fmt: skip
    cpu = _child_cpu(cmd)
    try:
        d = json.loads((out / "profile_export_aiperf.json").read_text())
    except (OSError, ValueError):
        return "no result (see its logs)", cpu, 0
    t = d["time_to_first_token"]
    ok = d["request_count"]["avg"]
    return (f"{ok:>6.0f} ok {d['request_throughput']['avg']:>6.0f} req/s  TTFT p50 "
            f"{t['p50']:>7.2f}ms p99 {t['p99']:>7.2f}ms  CPU {cpu:.1f}s"), cpu, int(ok)  # fmt: skip


def run_guidellm(
    url: str, n: int, turns: int, think: float, cpu: int, out: Path
) -> tuple[str, float, int]:
    """GuideLLM 0.8.1: constant n/think requests/s (what n sessions send), n*turns requests; it
    has no closed-loop sessions with think time, so the request rate is matched instead."""
    out.mkdir(parents=True, exist_ok=True)
    rate = n / think
    cmd = [
        "taskset", "-c", str(cpu), str(PEERS / "guidellm"), "run",
        "--backend", f"kind=openai_http,target={url},model=fake",
        "--profile", f"kind=constant,rate={rate:g}",
        "--constraint", f"kind=max_requests,count={max(10, n * turns)}",
        "--tokenizer", f"kind=hf_auto,model={TOKENIZER}",
        "--data", "kind=synthetic_text,prompt_tokens=1000,output_tokens=8",
        "--output", f"kind=json,path={out / 'out.json'}", "--disable-console-interactive",
    ]  # fmt: skip
    cpu = _child_cpu(cmd, cwd=out)
    try:
        b = json.loads((out / "out.json").read_text())["benchmarks"][0]["metrics"]
    except (OSError, ValueError, KeyError, IndexError):
        return "no result", cpu, 0
    t = b["time_to_first_token_ms"]["successful"]
    lag = b["request_dispatch_delay"]["successful"]["percentiles"]["p99"]
    return (f"{t['count']:>6} ok {b['requests_per_second']['successful']['mean']:>6.0f} req/s  "
            f"TTFT p50 {t['percentiles']['p50']:>7.2f}ms p99 {t['percentiles']['p99']:>7.2f}ms  "
            f"dispatch p99 {lag * 1e3:.1f}ms  CPU {cpu:.1f}s"), cpu, int(t["count"])  # fmt: skip


def peers(url: str, counts: list[int], turns: int, think: float, cpu: int) -> None:
    if not (PEERS / "aiperf").exists() and not (PEERS / "guidellm").exists():
        print(f"peers: none installed in {PEERS.parent} (python3 -m venv {PEERS.parent} && "
              f"{PEERS}/pip install aiperf==0.13.0 guidellm==0.8.1)")  # fmt: skip
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in (("AIPerf 0.13", run_aiperf), ("GuideLLM 0.8.1", run_guidellm)):
            runs = []
            for n in counts:
                line, used, reqs = fn(url, n, turns, think, cpu, Path(tmp) / f"{name[:3]}{n}")
                runs.append((used, reqs))
                print(f"{name:<15} {n:>5} sessions: {line}", flush=True)
            (c0, r0), (c1, r1) = runs[0], runs[-1]
            if r1 > r0 and c1 > c0:
                print(f"{name:<15} marginal CPU per request ({counts[0]} -> {counts[-1]} sessions): "
                      f"{(c1 - c0) / (r1 - r0) * 1e6:,.0f} us", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,250,500,1000,1500,2000,2500,3000,4000",
                    help="comma-separated session counts to try, in order")  # fmt: skip
    ap.add_argument("--turns", type=int, default=6, help="turns per session (default 6)")
    ap.add_argument("--think", type=float, default=1.0, help="think time between turns, s")
    ap.add_argument("--client-cpu", type=int, default=0, help="CPU for this client process")
    ap.add_argument("--server-cpu", type=int, default=1, help="CPU for the fake server")
    ap.add_argument("--peers", default="", metavar="N,N,...",
                    help="also run AIPerf and GuideLLM (from .cache/peers-venv) at these session "
                         "counts, pinned to the client CPU")  # fmt: skip
    ap.add_argument("--compare", type=Path, metavar="SRC",
                    help="also run each rung with the kvharness in SRC (before/after)")  # fmt: skip
    args = ap.parse_args()
    if args.compare is not None and not (args.compare / "kvharness" / "__init__.py").exists():
        ap.error(f"--compare: no kvharness package in {args.compare}")
    os.sched_setaffinity(0, {args.client_cpu})
    fake, url = start_fake(args.server_cpu)
    print(f"client on CPU {args.client_cpu}, fake server {url} on CPU {args.server_cpu}; "
          f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    if args.compare is None:
        print(f"{'sessions':>8} {'ok':>7} {'fail':>5} {'req/s':>7} {'lag p50':>8} {'lag p99':>8} "
              f"{'TTFT p50':>9} {'TTFT p99':>9} {'CPU/req':>8}  verdict")  # fmt: skip
    floor = None
    best = 0
    cpu_costs = []
    ours: list[tuple[float, int]] = []
    try:
        if args.compare is not None:
            counts = [int(x) for x in args.sessions.split(",")]
            compare(url, args.compare, counts, args.turns, args.think, args.client_cpu)
            return
        if args.peers:
            peers(url, [int(x) for x in args.peers.split(",")], args.turns, args.think,
                  args.client_cpu)  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            for i, n in enumerate(int(x) for x in args.sessions.split(",")):
                m = measure(url, n, args.turns, args.think, Path(tmp) / f"run{i}")
                if floor is None:
                    floor = m["ttft_p99_ms"]
                good = (m["failed"] == 0 and m["lag_p99_ms"] < 5.0
                        and m["ttft_p99_ms"] <= floor + 5.0)  # fmt: skip
                if good:
                    best = max(best, n)
                if n >= 500:
                    cpu_costs.append(m["cpu_us_per_req"])
                ours.append((m["cpu_s"], int(m["turns_ok"])))
                print(f"{n:>8} {m['turns_ok']:>7} {m['failed']:>5} {m['req_per_s']:>7.0f} "
                      f"{m['lag_p50_ms']:>6.2f}ms {m['lag_p99_ms']:>6.2f}ms "
                      f"{m['ttft_p50_ms']:>7.2f}ms {m['ttft_p99_ms']:>7.2f}ms "
                      f"{m['cpu_us_per_req']:>6.0f}us  "
                      f"{'ok' if good else 'over'}", flush=True)  # fmt: skip
    finally:
        fake.terminate()
        fake.wait()
    print(f"kvharness bench: {best} concurrent sessions on one core within send lag p99 < 5 ms "
          f"and TTFT p99 <= floor ({floor:.2f} ms) + 5 ms; load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    if len(ours) >= 2 and ours[-1][1] > ours[0][1]:
        (c0, r0), (c1, r1) = ours[0], ours[-1]
        print(f"kvharness bench marginal CPU per request: {(c1 - c0) / (r1 - r0) * 1e6:,.0f} us")
    if cpu_costs:
        cost = float(np.median(cpu_costs))
        per_session = 1.0 / (args.think + 0.001)  # requests/s one session sends at think time
        print(f"client CPU per request (median over runs of >= 500 sessions): {cost:.0f} us; at 50% "
              f"of one free core that is {0.5e6 / cost / per_session:,.0f} sessions of {args.think:g} s "
              "think time (a projection from CPU cost, not a measurement)")  # fmt: skip


if __name__ == "__main__":
    main()
