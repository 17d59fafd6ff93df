"""Cost-model presets against TensorRT-LLM's published H200 FP8 maximum-throughput figures.

Each case runs the engine model (one replica: block pool + scheduler + cost model) on a burst of
identical requests with no prefix sharing, as trtllm-bench's throughput mode does, and prints the
simulated output tokens/s next to the published figure. Target: a ratio within 0.67-1.5x.

    .venv/bin/python benchmarks/cost_presets.py
"""

from __future__ import annotations

import heapq

from kvharness.engine.cost import HARDWARE, MODELS, Deployment
from kvharness.engine.replica import Replica
from kvharness.engine.request import Request
from kvharness.engine.scheduler import SchedulerConfig

# (model, ISL, OSL, published output tokens/s): TensorRT-LLM performance overview, H200 FP8, TP1.
CASES = [
    ("llama-3.1-8b", 1000, 1000, 17_744),
    ("llama-3.1-8b", 2048, 128, 3_538),
    ("llama-3.3-70b", 1000, 1000, 2_909),
    ("llama-3.3-70b", 2048, 128, 442),
]


def throughput(model: str, isl: int, osl: int, n: int = 3000) -> tuple[float, int]:
    """Simulated output tokens/s of ``n`` requests submitted at once, and the peak batch size."""
    dep = Deployment(HARDWARE["H200"], MODELS[model], weight_dtype="fp8", kv_dtype="fp8")
    rep = Replica("r", dep, SchedulerConfig(max_num_batched_tokens=8192, max_num_seqs=2048))
    for i in range(n):
        rep.submit(Request(f"q{i}", (), isl, osl, 0.0), 0.0)
    heap = [(0.0, rep.version)]
    now, peak = 0.0, 0
    while heap:
        now, v = heapq.heappop(heap)
        if v != rep.version:
            continue
        rep.wake(now)
        peak = max(peak, rep.running)
        if rep.next_wake is not None:
            heapq.heappush(heap, (rep.next_wake, rep.version))
    return n * osl / now, peak


def main() -> None:
    print(f"{'model':<15} {'ISL/OSL':>10} {'sim tok/s':>10} {'TRT-LLM':>9} {'ratio':>6}  batch")
    for model, isl, osl, ref in CASES:
        tps, peak = throughput(model, isl, osl)
        ratio = tps / ref
        flag = "" if 0.67 <= ratio <= 1.5 else "  OUTSIDE 0.67-1.5x"
        print(
            f"{model:<15} {f'{isl}/{osl}':>10} {tps:>10,.0f} {ref:>9,} {ratio:>6.2f}  {peak}{flag}"
        )


if __name__ == "__main__":
    main()
