"""How many concurrent agent sessions a deployment holds within an SLO tier: searched live, and
predicted by its digital twin.

    .venv/bin/python benchmarks/twin_capacity.py [--out DIR] [--replicas 1 2]
        [--tiers ttft=1,speed=200 ttft=1,speed=100] [--max-concurrency 16]

For each replica count N, from scratch on vLLM-CPU replicas of the tiny model (``make vllm``):

1. N replicas, behind ``kvharness gateway --policy agent_aware`` when N > 1 (as a deployment
   runs them);
2. **calibration**: one run of 24 synthetic sessions arriving as a Poisson process (the one of
   ``benchmarks/twin_validation.py``), fitted by ``kvharness sim calibrate`` (through the
   gateway: ``--router agent_aware --replicas N``), so that what N replicas sharing this machine
   cost each other is in the profile;
3. for each tier: ``kvharness bench capacity`` (the live search: doubling the sessions in flight,
   then bisecting, each point a run from a cold cache of 2 sessions per session in flight) and
   ``kvharness sim capacity --cluster Nxprofile:PATH`` (the same search on the twin, routed by
   agent_aware when N > 1), on the same workload, tier and range.

Prints per (replicas, tier) the live and the predicted capacity, their difference in search
steps (points of the search between them), each search's points, and how long each took. The
tiers' defaults suit the tiny model on this machine, whose output speed p10 falls from about
380 tok/s at one session in flight to 70 at eight (TTFT p90 stays under 0.5 s): one replica
crosses them between 2 and 8; ``--tiers`` takes any ``kvharness bench capacity --tier``. The
workload (48 sessions of ``twin_validation.py``'s synthetic spec) has sessions enough for every
point up to 24 in flight.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from twin_validation import SYN, bench, calibrate, gateway

from kvharness.testing import ReplicaConfig, ensure_tiny_model, start_replicas
from kvharness.testing.procs import stop_process

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = SYN.format(seed=40).replace("sessions=12", "sessions=48")


def kvharness(*args: str) -> float:
    """Run ``kvharness ARGS``; its wall time."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kvharness", *args], capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode:
        raise SystemExit(f"kvharness {' '.join(args[:2])} failed: {done.stderr[-1500:]}")
    return time.perf_counter() - t0


def search_args(tier: str, cap: int) -> list[str]:
    return ["--workload", WORKLOAD, "--time-scale", "0.05", "--tier", tier,
            "--max-concurrency", str(cap), "--sessions-per-slot", "2"]  # fmt: skip


def points(path: Path) -> tuple[int, list[str]]:
    doc = json.loads(path.read_text())
    tried = [f"{p['concurrency']}{'+' if p['meets'] else '-'}" for p in doc["points"]]
    return int(doc["capacity"]), tried


def steps_apart(live: int, twin: int, tried: Sequence[int]) -> int:
    """Points of the search strictly between the two answers, plus one (0: the same answer)."""
    lo, hi = sorted((live, twin))
    return 0 if lo == hi else 1 + sum(1 for n in set(tried) if lo < n < hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="where the runs go (default: temp)")
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tiers", nargs="+", default=["ttft=1,speed=200", "ttft=1,speed=100"])
    ap.add_argument("--max-concurrency", type=int, default=16)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kvh-twin-capacity-"))
    out.mkdir(parents=True, exist_ok=True)
    model = ensure_tiny_model(REPO / ".cache" / "tiny-llama")
    rows: list[str] = []
    for n in args.replicas:
        where = out / f"r{n}"
        print(f"{n} replica(s): starting vLLM-CPU ...", file=sys.stderr, flush=True)
        reps = start_replicas(n, ReplicaConfig(model_dir=model, max_model_len=32768))
        proc = None
        try:
            engines = [a for r in reps for a in ("--metrics-url", r.url)]
            if n > 1:
                proc, url = gateway(reps, model)
                backend, routed = [url], ["--router", "agent_aware", "--replicas", str(n)]
            else:
                backend, routed = [reps[0].url], []
            calibration = SYN.format(seed=1).replace("sessions=12", "sessions=24")
            t0 = time.perf_counter()
            cal = bench(where / "calibration", backend, calibration, "--rate", "1.5", *engines)
            cal_run_s = time.perf_counter() - t0
            profile = where / "engine.json"
            _, fit_s = calibrate([cal], profile, *routed)
            for k, tier in enumerate(args.tiers):
                live_dir, twin_dir = where / f"live-{k}", where / f"twin-{k}"
                live_s = kvharness(
                    "bench", "capacity", *[a for b in backend for a in ("--backend", b)],
                    *engines, *(["--replicas", str(n)] if n > 1 else []),
                    *search_args(tier, args.max_concurrency), "--out", str(live_dir),
                )  # fmt: skip
                twin_s = kvharness(
                    "sim", "capacity", "--cluster", f"{n}xprofile:{profile}",
                    "--policy", "agent_aware", *search_args(tier, args.max_concurrency),
                    "--out", str(twin_dir),
                )  # fmt: skip
                live, live_pts = points(live_dir / "capacity.json")
                twin, twin_pts = points(twin_dir / "capacity.json")
                tried = [int(p[:-1]) for p in live_pts + twin_pts]
                rows.append(
                    f"{n:>8} {tier:<18} {live:>5} {twin:>5} {steps_apart(live, twin, tried):>6}  "
                    f"{' '.join(live_pts):<28} {' '.join(twin_pts):<28} {live_s:>6.0f}s "
                    f"{twin_s:>6.1f}s"
                )
                print(rows[-1], file=sys.stderr, flush=True)
        finally:
            if proc is not None:
                stop_process(proc)
            for r in reps:
                r.stop()
        rows.append(f"{'':>8} calibration: run {cal_run_s:.0f} s, fit {fit_s:.1f} s ({profile})")
    print(f"\nworkload {WORKLOAD}; runs under {out}")
    print(f"{'replicas':>8} {'tier':<18} {'live':>5} {'twin':>5} {'steps':>6}  "
          f"{'live points (+ meets)':<28} {'twin points':<28} {'live':>7} {'twin':>7}")  # fmt: skip
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
