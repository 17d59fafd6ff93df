"""The gateway against sglang-router, vllm-router and round robin on real vLLM-CPU replicas.

Starts ``--replicas`` vLLM-CPU replicas of the tiny model (KV events on, prefix caching, optionally
squeezed with ``--num-gpu-blocks``), then for each router in turn: resets every replica's prefix
cache, starts the router, drives the same workload through it with ``kvharness bench``, stops it.
The workload is the real SWE-agent trajectories (chat messages) by default, or any bench workload
spec such as ``synthetic:...`` (hash-only chains, sent as the same text prompts to every router:
``--prompt-format text``, one single-token word per token, so vLLM's cached tokens stay comparable
with the workload's ideal). Every request carries the session's ``x-session-id`` header; routers
that do not use it ignore it. With ``--repeats``, rounds alternate the routers' order so that drift
in a shared machine's load hits each alike.

Printed: one row per router over the sessions that every run completed, pooled over rounds: the
cached-token ratio vLLM reported (``usage.prompt_tokens_details``), the workload's ideal, the mean
and p90 session makespan, the mean against the best peer's (sglang or vllm), each round's mean,
the router's CPU seconds per run (its processes'; on this machine the router's CPU is taken from
the replicas' cores), and how the prompt tokens were spread over the replicas.

Routers and how each is configured (at its best as far as its options go):

* ``kvharness``: ``kvharness gateway --policy agent_aware`` with the model's tokenizer and chat
  template and every replica's KV events (block size read from the replicas).
* ``sglang``: ``sglang-router launch --policy cache_aware`` (its approximate radix tree over the
  request text; default thresholds, which are its tuned ones); Prometheus on a free port.
* ``vllm``: ``vllm-router --policy kv_aware`` with ``--kv-event-source`` per replica,
  ``--kv-event-block-size`` = the engines' block size and ``--kv-event-model``.
* ``round_robin``: ``kvharness gateway --policy round_robin`` (the no-cache baseline).
* ``kvharness:KEY=VALUE,...``: the same with these agent_aware options (ablations).
* ``gateway:POLICY``: ``kvharness gateway --policy POLICY`` without KV events (e.g.
  ``gateway:session``, to tell the gateway's own cost from its policy's).

Peers come from PyPI (``pip install sglang-router vllm-router`` into ``--routers-venv``).

    .venv/bin/python benchmarks/gateway_compare.py [--replicas 2] [--num-gpu-blocks N]
        [--workload SPEC] [--concurrency 8] [--max-sessions 22] [--repeats 1]
        [--routers kvharness sglang vllm round_robin]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec

from kvharness.report.metrics import summarise
from kvharness.report.records import TurnRecord, read_records
from kvharness.testing import ReplicaConfig, ensure_tiny_model
from kvharness.testing.procs import poll, session_cpu_seconds, stop_process, wait_up
from kvharness.testing.vllm import VllmReplica, free_port, start_replicas

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / ".." / "shared" / "traces" / "swe-agent"


def wait_routable(
    url: str, model: str, proc: subprocess.Popen[bytes], timeout: float = 300
) -> None:
    """Until a small chat request through the router succeeds (a router's /health may answer
    before it has registered its workers)."""
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "ready? " * 8}], "max_tokens": 1}
    ).encode()
    req = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    poll(f"{url} never served a request", req, proc, timeout=timeout, every=2.0, request_timeout=60)


def prompt_tokens(rep: VllmReplica) -> float:
    """The replica's ``vllm:prompt_tokens_total`` counter (all prompt tokens it was sent)."""
    text = urllib.request.urlopen(rep.url + "/metrics", timeout=30).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:prompt_tokens_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def reset_caches(reps: list[VllmReplica]) -> None:
    for r in reps:
        req = urllib.request.Request(r.url + "/reset_prefix_cache", data=b"", method="POST")
        urllib.request.urlopen(req, timeout=30).read()


def is_gateway(name: str) -> bool:
    """Whether router ``name`` is a kvharness gateway (its metrics are kept)."""
    return name in ("kvharness", "round_robin") or name.startswith(("kvharness:", "gateway:"))


def router_command(
    name: str, reps: list[VllmReplica], port: int, model: Path, venv: Path, options: list[str]
) -> tuple[list[str], str]:
    """(command, health path) of a router listening on ``port`` in front of ``reps``."""
    urls = [r.url for r in reps]
    if is_gateway(name):
        cmd = [sys.executable, "-m", "kvharness", "gateway", "--port", str(port),
               "--tokenizer", str(model), "--max-queue", "1000"]  # fmt: skip
        for r in reps:
            cmd += ["--backend", r.url]
        if name == "kvharness" or name.startswith("kvharness:"):
            cmd += ["--policy", "agent_aware"]
            extra = [o for o in name.partition(":")[2].split(",") if o]
            for opt in [*options, *extra]:
                cmd += ["--policy-option", opt]
            for r in reps:
                assert r.kv_events is not None
                cmd += ["--kv-events", f"{r.url}=tcp://*:{r.kv_events.rsplit(':', 1)[1]}"]
        else:
            cmd += ["--policy", name.partition(":")[2] or "round_robin"]
        return cmd, "/health"
    if name == "sglang":
        cmd = [str(venv / "bin" / "sglang-router"), "launch", "--host", "127.0.0.1",
               "--port", str(port), "--policy", "cache_aware",
               "--prometheus-port", str(free_port()), "--worker-urls", *urls]  # fmt: skip
        return cmd, "/health"
    if name == "vllm":
        cmd = [str(venv / "bin" / "vllm-router"), "--host", "127.0.0.1", "--port", str(port),
               "--policy", "kv_aware", "--kv-event-block-size", str(reps[0].block_size),
               "--kv-event-model", reps[0].model, "--prometheus-port", str(free_port()),
               "--worker-urls", *urls]  # fmt: skip
        for r in reps:
            assert r.kv_events is not None
            cmd += ["--kv-event-source", f"{r.url}={r.kv_events}"]
        return cmd, "/health"
    raise SystemExit(f"unknown router {name!r}")


def run_router(
    name: str, run_dir: Path, reps: list[VllmReplica], model: Path, args: argparse.Namespace
) -> tuple[list[TurnRecord], list[float], float]:
    """Start router ``name`` in front of ``reps`` (caches reset), drive the workload through it
    with ``kvharness bench`` into ``run_dir``; its records, the prompt tokens each replica
    was sent, and the router's CPU seconds during the run (it shares the machine's cores with
    the replicas)."""
    reset_caches(reps)
    port = free_port()
    cmd, health = router_command(name, reps, port, model, args.routers_venv, args.policy_option)
    log = (args.out / f"{run_dir.name}.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_up(f"http://127.0.0.1:{port}{health}", proc)
        wait_routable(f"http://127.0.0.1:{port}", reps[0].model, proc)
        reset_caches(reps)
        time.sleep(2.0)  # let event subscriptions settle
        bench = [sys.executable, "-m", "kvharness", "bench",
                 "--target", f"http://127.0.0.1:{port}", "--workload", args.workload,
                 "--tokenizer", str(model / "tokenizer.json"), "--model", reps[0].model,
                 "--concurrency", str(args.concurrency), "--time-scale", str(args.time_scale),
                 "--out", str(run_dir), "--label", name, "--no-progress", "--no-metrics",
                 "--engine-block-size", str(reps[0].block_size),
                 "--prompt-format", args.prompt_format]  # fmt: skip
        if args.max_sessions:
            bench += ["--max-sessions", str(args.max_sessions)]
        print(f"[{run_dir.name}] {' '.join(cmd)}", file=sys.stderr, flush=True)
        before = [prompt_tokens(r) for r in reps]
        cpu0 = session_cpu_seconds(proc.pid)
        done = subprocess.run(bench, env={**os.environ}, capture_output=True, text=True)
        if not (run_dir / "records.jsonl").exists():
            raise SystemExit(f"[{name}] bench failed (exit {done.returncode}):\n"
                             f"{done.stderr.strip()[-2000:]}")  # fmt: skip
        cpu = session_cpu_seconds(proc.pid) - cpu0
        sent = [prompt_tokens(r) - b for r, b in zip(reps, before, strict=True)]
        if is_gateway(name):
            # Keep the gateway's own view (decisions by reason, matched prefixes...).
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as m:
                (args.out / f"{run_dir.name}.metrics").write_bytes(m.read())
        return read_records(run_dir / "records.jsonl"), sent, cpu
    finally:
        stop_process(proc, 15)
        log.close()


def completed_sessions(records: list[TurnRecord]) -> set[str]:
    """Sessions whose every turn succeeded in the end (an abandoned session ends in an error)."""
    last: dict[str, TurnRecord] = {}
    for r in records:
        k = last.get(r.session)
        if k is None or (r.turn, r.attempt) >= (k.turn, k.attempt):
            last[r.session] = r
    return {sid for sid, r in last.items() if r.error is None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=2, help="vLLM-CPU replicas to start")
    ap.add_argument("--num-gpu-blocks", type=int, help="KV blocks per replica (cache pressure)")
    ap.add_argument("--max-model-len", type=int, default=32768,
                    help="vLLM --max-model-len (its KV must hold one such sequence: with "
                         "--num-gpu-blocks N, at most N x 128)")  # fmt: skip
    ap.add_argument("--routers", nargs="+", default=["kvharness", "sglang", "vllm", "round_robin"],
                    help="routers to compare, in order")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds over the routers, in alternating order (forward, reversed, ...), "
                         "so that drift in the machine's load hits every router alike")  # fmt: skip
    ap.add_argument("--workload", default=str(TRACES), help="kvharness bench --workload SPEC")
    ap.add_argument("--concurrency", type=int, default=8, help="sessions in flight")
    ap.add_argument("--max-sessions", type=int, help="run only the first N sessions")
    ap.add_argument("--time-scale", type=float, default=1.0, help="scale of tool gaps")
    ap.add_argument("--prompt-format", choices=("tokens", "text"), default="text",
                    help="how bench sends hash-only (e.g. synthetic) turns; text for all four "
                         "routers, as sglang-router routes on text only")  # fmt: skip
    ap.add_argument("--policy-option", action="append", default=[],
                    help="KEY=VALUE passed to the kvharness gateway's policy")  # fmt: skip
    ap.add_argument("--routers-venv", type=Path, default=REPO / ".cache" / "routers",
                    help="virtual environment holding sglang-router and vllm-router")  # fmt: skip
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "gateway-compare",
                    help="folder for the bench runs and router logs")  # fmt: skip
    args = ap.parse_args()

    model = ensure_tiny_model(REPO / ".cache" / "tiny-llama")
    # The tiny tokenizer (1024 tokens) makes the trajectories' prompts longer than a real one would.
    cfg = ReplicaConfig(
        model_dir=model, num_gpu_blocks=args.num_gpu_blocks, max_model_len=args.max_model_len
    )
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"starting {args.replicas} vLLM-CPU replicas ...", file=sys.stderr, flush=True)
    reps = start_replicas(args.replicas, cfg, log_dir=args.out / "vllm-logs")
    runs: dict[str, list[tuple[list[TurnRecord], list[float], float]]] = {
        n: [] for n in args.routers
    }
    try:
        for k in range(args.repeats):
            for name in args.routers if k % 2 == 0 else args.routers[::-1]:
                run_dir = args.out / f"run-{name}-{k}"
                runs[name].append(run_router(name, run_dir, reps, model, args))
    finally:
        for r in reps:
            r.stop()

    # Compare on the sessions every run completed (a router that rejects a session's request,
    # as sglang-router does some SWE-agent tool-call messages, is not credited for the rest).
    common = set.intersection(*(completed_sessions(rec) for v in runs.values() for rec, *_ in v))
    rows = []
    for name, v in runs.items():
        pooled = [
            msgspec.structs.replace(r, session=f"{k}/{r.session}")
            for k, (rec, *_) in enumerate(v)
            for r in rec
            if r.session in common
        ]
        errors = sum(1 for rec, *_ in v for r in rec if r.error is not None)
        sent = [sum(x) for x in zip(*(t for _, t, _ in v), strict=True)]
        split = "/".join(f"{100 * x / max(1.0, sum(sent)):.0f}" for x in sent)
        means = [summarise([r for r in rec if r.session in common]).makespan.mean for rec, *_ in v]
        cpu = sum(c for *_, c in v) / len(v)
        rows.append((name, summarise(pooled, label=name), split, errors, means, cpu))

    blocks = f", {args.num_gpu_blocks} KV blocks each" if args.num_gpu_blocks else ""
    print(f"\n{args.replicas} vLLM-CPU replicas (tiny Llama, block {reps[0].block_size}{blocks}); "
          f"workload {args.workload}; {args.concurrency} sessions in flight; "
          f"{args.repeats} round(s); {len(common)} sessions completed by every run")  # fmt: skip
    print(f"{'router':<12} {'turns ok':>8} {'errors':>6} {'cached':>8} {'ideal':>8} "
          f"{'vs ideal':>8} {'makespan mean':>14} {'p90':>8} {'vs best peer':>13} "
          f"{'mean per round':>20} {'router CPU':>10}  prompt tokens per replica %")  # fmt: skip
    peers = [s.makespan.mean for n, s, *_ in rows if n in ("sglang", "vllm") and s.makespan.mean]
    best_peer = min(peers) if peers else None

    def pc(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    def sec(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}s"

    for name, s, split, errors, means, cpu in rows:
        c = s.cache
        m = s.makespan.mean
        vs_peer = "-" if best_peer is None or m is None else f"{m / best_peer:.3f}x"
        per_round = "/".join("-" if x is None else f"{x:.1f}" for x in means)
        print(f"{name:<12} {s.turns_ok:>8} {errors:>6} {pc(c.achieved_ratio):>8} "
              f"{pc(c.ideal_ratio):>8} {pc(c.achieved_vs_ideal):>8} {sec(m):>14} "
              f"{sec(s.makespan.p90):>8} {vs_peer:>13} {per_round:>20} {cpu:>9.1f}s  {split}")  # fmt: skip


if __name__ == "__main__":
    main()
