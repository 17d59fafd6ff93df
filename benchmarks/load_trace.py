"""Time loading the whole Mooncake conversation trace (target: under 2 s on the project machine).

    .venv/bin/python benchmarks/load_trace.py [--repeat 5]

Prints the best and median wall time of `load_mooncake` (parse, validate, infer sessions).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from kvharness.workload.mooncake import load_mooncake

TRACE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "traces"
    / "mooncake"
    / "conversation_trace.jsonl"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed loads (default 5)")
    parser.add_argument("--trace", type=Path, default=TRACE, help="trace to load")
    args = parser.parse_args()
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        w = load_mooncake(args.trace)
        times.append(time.perf_counter() - t0)
    print(f"trace: {args.trace.name}: {w.num_turns} requests, {len(w.sessions)} sessions")
    print(
        f"load time: best {min(times):.3f} s, median {statistics.median(times):.3f} s "
        f"over {args.repeat} loads (target < 2 s)"
    )


if __name__ == "__main__":
    main()
