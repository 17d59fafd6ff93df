"""Computer-use sessions against the tiny VLM on vLLM-CPU: cached tokens achieved vs the ideal.

Starts one vLLM-CPU replica of the tiny random-weight Idefics3 (:mod:`kvharness.testing.tiny_vlm`,
prefix caching on), then for keep-all and keep-last-3 screenshots in turn: resets its prefix
cache and drives the same computer-use sessions (``computer-use:...`` at 640x400, whose
screenshots take the tiny VLM's own placeholder count) through ``kvharness bench``, each
screenshot sent as a real PNG (a page rendered by headless Chromium, stamped with the image's
hash). Printed per setting: turns, prompt tokens, the cached-token ratio vLLM reported, the
workload's ideal, the difference in points, and TTFT p50/p90 (each bench run's own table, printed
before, splits the engine's time into queue and prefill from vLLM's histograms). vLLM 0.32 reports
no encoder time (its only multimodal metrics are the processor cache's queries and hits), so the
encoder's share of TTFT is inside its prefill time and cannot be told apart live.

    .venv/bin/python benchmarks/vlm_bench.py [--sessions 4] [--steps 8] [--concurrency 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from kvharness.bench.run import reset_prefix_cache
from kvharness.cli import main as cli
from kvharness.report.records import read_records
from kvharness.testing import ReplicaConfig, start_replica
from kvharness.testing.tiny_vlm import SERVED_NAME, ensure_tiny_vlm, image_tokens

REPO = Path(__file__).resolve().parents[1]
W, H = 640, 400


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=4, help="computer-use sessions (default 4)")
    ap.add_argument("--steps", type=float, default=8.0, help="mean calls per session (default 8)")
    ap.add_argument("--concurrency", type=int, default=1, help="sessions in flight (default 1)")
    ap.add_argument("--keep", default="0,3", help="keep_last settings, 0 = all (default 0,3)")
    args = ap.parse_args(argv)
    model = ensure_tiny_vlm(REPO / ".cache" / "tiny-idefics3")
    cfg = ReplicaConfig(model_dir=model, served_name=SERVED_NAME, kv_events=False,
                        extra_args=("--limit-mm-per-prompt", json.dumps({"image": 16})))  # fmt: skip
    rep = start_replica(cfg)
    rows = []
    try:
        for keep in (int(k) for k in args.keep.split(",")):
            spec = (f"computer-use:sessions={args.sessions},steps_mean={args.steps},steps_max=14,"
                    f"keep_last={keep},width={W},height={H},image_tokens={image_tokens(W, H)},"
                    "system_tokens=600,gap_median=0.2,seed=1")  # fmt: skip
            assert reset_prefix_cache(rep.url)
            out = Path(tempfile.mkdtemp()) / "run"
            code = cli(["bench", "--backend", rep.url, "--workload", spec, "--tokenizer",
                        str(model), "--concurrency", str(args.concurrency),
                        "--image-wrap-tokens", "0", "--screens", str(REPO / ".cache" / "screens"),
                        "--out", str(out), "--no-progress"])  # fmt: skip
            if code:
                return code
            recs = [r for r in read_records(out / "records.jsonl") if r.ok]
            prompt = sum(r.prompt_tokens for r in recs)
            cached = sum(r.cached_tokens for r in recs) / prompt
            ideal = sum(r.ideal_cached_tokens for r in recs) / prompt
            ttft = [r.first_token - r.sent for r in recs if r.first_token is not None]
            rows.append((keep, len(recs), prompt, cached, ideal, ttft))
    finally:
        rep.stop()
    print(f"{'screenshots':>12s} {'turns':>6s} {'prompt tok':>11s} {'cached':>8s} {'ideal':>8s} "
          f"{'diff pt':>8s} {'TTFT p50':>9s} {'TTFT p90':>9s}")  # fmt: skip
    for keep, n, prompt, cached, ideal, ttft in rows:
        name = "all" if keep == 0 else f"last {keep}"
        print(
            f"{name:>12s} {n:6d} {prompt:11,d} {cached:8.1%} {ideal:8.1%} "
            f"{100 * (cached - ideal):+8.2f} {_pct(ttft, 0.5):8.3f}s {_pct(ttft, 0.9):8.3f}s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
