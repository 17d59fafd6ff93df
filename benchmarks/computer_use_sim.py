"""Computer-use agents on a Qwen2.5-VL-7B fleet: what routing does when every call carries images.

16 replicas of Qwen2.5-VL-7B on one H200 each (FP8 language model, BF16 vision encoder, vLLM's
16-token KV blocks and default encoder cache), every registered routing policy, on sessions of
the computer-use generator (:mod:`kvharness.workload.computer_use`: a 1920x1080 screenshot, 1,222
placeholder tokens, after each of some 38 actions, 1.5 s apart) in two variants:

* ``keep_last=0`` (keep all): every prompt extends the previous one, screenshots included, so a
  turn routed where its session ran before recomputes only its newest screenshot;
* ``keep_last=3``: older screenshots are replaced by text, which rewrites each prompt's middle:
  the prefix cache stops at the first replaced screenshot, and the two kept ones after it are
  recomputed every turn, their encoder outputs found in the encoder cache only on a replica that
  encoded them recently.

Per variant and load, one row per policy: goodput (sessions per hour within ``--deadline`` of
their lower bound), TTFT p50/p99, hit ratio achieved / ideal, the vision encoder's share of GPU
time and of TTFT, and how many screenshots were encoded, found in an encoder cache, or covered
by the prefix cache; then, per load, the best policy of each variant side by side.

Short by default (128 sessions arriving at 1 a second, one load: two minutes with ``--workers 2``);
``--full`` runs 1,024 sessions at loads 1 and 4 (``--workers`` processes help). Say which when
quoting figures.

Run: ``.venv/bin/python benchmarks/computer_use_sim.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from kvharness.report.io import parse_deadline
from kvharness.routing.registry import available_policies
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig
from kvharness.sim.summary import PolicyRow, VisionStats
from kvharness.sim.sweep import SimJob, run_job


def _spec(args: argparse.Namespace, keep: int) -> str:
    return (
        f"computer-use:sessions={args.sessions},keep_last={keep},rate={args.rate:g},"
        f"block_size=16,seed={args.seed}"
    )


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _table(rows: list[PolicyRow]) -> None:
    best = max((r.goodput or 0.0 for r in rows), default=0.0)
    head = (
        f"  {'policy':<20} {'goodput/h':>9} {'in time':>9} {'TTFT p50':>8} {'p99':>6} "
        f"{'hit/ideal':>9} {'enc/GPU':>7} {'enc/TTFT':>8} {'encoded':>8} {'enc hit':>7} "
        f"{'prefix':>7}"
    )
    print(head)
    for r in rows:
        v = r.vision
        assert isinstance(v, VisionStats)
        mark = "*" if best and r.goodput == best else " "
        print(
            f"  {r.policy:<19}{mark} {_f(r.goodput, '.0f'):>9} "
            f"{f'{r.sessions_within_deadline}/{r.sessions}':>9} {_f(r.ttft_p50, '.3f'):>8} "
            f"{_f(r.ttft_p99, '.2f'):>6} {_f(r.hit_ratio, '.3f'):>9} "
            f"{_f(v.encoder_share, '.3f'):>7} {_f(v.ttft_encoder_share, '.3f'):>8} "
            f"{v.images_encoded:>8} {v.encoder_cache_hits:>7} {v.images_prefix_cached:>7}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="16xH200:qwen2.5-vl-7b", help="replicas x hardware:model")
    ap.add_argument("--policies", default="all", help="comma-separated policy names, or all")
    ap.add_argument("--keep", default="0,3", help="keep_last variants, comma-separated (0: all)")
    ap.add_argument("--sessions", type=int, default=128, help="computer-use sessions")
    ap.add_argument("--rate", type=float, default=1.0, help="session arrivals per second")
    ap.add_argument("--loads", default="1", help="arrival-rate multipliers, comma-separated")
    ap.add_argument(
        "--deadline", default="1.5x", help="session deadline: seconds or a factor x its lower bound"
    )
    ap.add_argument("--seed", type=int, default=0, help="workload seed")
    ap.add_argument("--workers", type=int, default=1, help="processes to run simulations in")
    ap.add_argument(
        "--full", action="store_true", help="the full figures: 1,024 sessions at loads 1 and 4"
    )
    args = ap.parse_args(argv)
    if args.full:
        args.sessions, args.loads = 1024, "1,4"
    names = available_policies()
    policies = names if args.policies == "all" else args.policies.split(",")
    unknown = [p for p in policies if p not in names]
    if unknown:
        ap.error(f"unknown policies {', '.join(unknown)}; choose from {', '.join(names)}")
    keeps = [int(k) for k in args.keep.split(",")]
    loads = [float(x) for x in args.loads.split(",")]
    parse_deadline(args.deadline)
    cluster = parse_cluster(args.cluster)
    grid = [(k, load, p) for k in keeps for load in loads for p in policies]
    jobs = [
        SimJob(_spec(args, k), SimConfig(cluster, p, load=load), deadline=args.deadline)
        for k, load, p in grid
    ]
    print(
        f"{len(jobs)} simulations: {args.cluster}, {args.sessions} computer-use sessions at "
        f"{args.rate:g}/s x loads {args.loads}, keep_last {args.keep}, deadline {args.deadline}",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(run_job, jobs))
    else:
        rows = [run_job(j) for j in jobs]
    by: dict[tuple[int, float], list[PolicyRow]] = {}
    for (k, load, _), row in zip(grid, rows, strict=True):
        by.setdefault((k, load), []).append(row)
    for (k, load), table in by.items():
        what = "keep all screenshots" if k == 0 else f"keep the last {k} screenshots"
        v = table[0].vision
        assert isinstance(v, VisionStats)
        print(
            f"\n{table[0].cluster} · {what} · load x{load:g} · {table[0].turns} calls, "
            f"{v.image_tokens / 1e6:.1f}M image tokens ({_f(v.image_token_share, '.0%')} of "
            "prompt tokens)"
        )
        _table(table)
    print(
        "\n  enc/GPU: encoder time / busy time · enc/TTFT: encoder time / TTFT · encoded / enc "
        "hit / prefix: screenshots encoded, found in an encoder cache, inside a prefix-cache hit"
    )
    for load in loads:
        parts = []
        for k in keeps:
            best = max(by[k, load], key=lambda r: r.goodput or 0.0)
            v = best.vision
            assert isinstance(v, VisionStats)
            parts.append(
                f"keep_last={k}: {best.policy} {_f(best.goodput, '.0f')}/h, hit/ideal "
                f"{_f(best.hit_ratio, '.3f')}, encoder {_f(v.encoder_share, '.1%')} of GPU time"
            )
        print(f"load x{load:g}, best policy: " + "; ".join(parts))
    print(f"{len(jobs)} simulations in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
