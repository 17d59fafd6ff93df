"""The computer-use environment over its bundled task suite, in the real sandboxed browser.

Runs every family's variants for ``--seeds`` with each scripted agent (oracle, halfway, noop,
random) at ``--concurrency`` episodes in flight, then prints:

1. **rewards per agent:** mean episode reward, solved episodes, and the lowest and highest reward
   (the oracle must solve every task, noop earn 0, random stay below 0.1, halfway get part);
2. **rewards per family:** each agent's mean per family (the halfway agent's partial credit);
3. **per step:** the wall time of one step (the action, the page settling, the hidden state read
   and the screenshot) p50/p90 with its parts, and the browser start (reset) p50/p90;
4. **throughput:** oracle episodes per minute at the concurrency given.

    .venv/bin/python benchmarks/web_env.py [--seeds 0-2] [--concurrency 2] [--max-steps 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from kvharness.cli._web import parse_seeds
from kvharness.env.web.apps import suite
from kvharness.env.web.run import WebRunConfig, run_suite

AGENTS = ("oracle", "halfway", "noop", "random")


def _p(values: list[float], q: float) -> str:
    return f"{1000 * float(np.percentile(values, q)):.0f} ms" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-2", help="variant seeds (default 0-2)")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=40)
    args = parser.parse_args()
    tasks = suite(parse_seeds(args.seeds))
    print(f"{len(tasks)} tasks ({len({t.family for t in tasks})} families x seeds {args.seeds}), "
          f"concurrency {args.concurrency}")  # fmt: skip
    results: dict[str, list[dict[str, object]]] = {}
    walls: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kvh-web-bench-") as tmp:
        for agent in AGENTS:
            cfg = WebRunConfig(agent=agent, concurrency=args.concurrency, max_steps=args.max_steps)
            out = Path(tmp) / agent
            out.mkdir()
            t0 = time.monotonic()
            results[agent] = asyncio.run(run_suite(tasks, cfg, out))
            walls[agent] = time.monotonic() - t0
    print("\n1. rewards per agent")
    print(f"{'agent':10s} {'episodes':>8s} {'mean':>7s} {'solved':>7s} {'min':>6s} {'max':>6s}")
    for agent, eps in results.items():
        rewards = [float(e["reward"]) for e in eps]  # type: ignore[arg-type]
        solved = sum(1 for r in rewards if r == 1.0)
        print(f"{agent:10s} {len(eps):8d} {statistics.mean(rewards):7.3f} {solved:7d} "
              f"{min(rewards):6.2f} {max(rewards):6.2f}")  # fmt: skip
    print("\n2. mean reward per family")
    families = sorted({t.family for t in tasks})
    print(f"{'family':22s} " + " ".join(f"{a:>8s}" for a in AGENTS))
    for fam in families:
        row = []
        for agent in AGENTS:
            rs = [
                float(e["reward"]) for e in results[agent] if str(e["task"]).startswith(fam + "/")
            ]  # type: ignore[arg-type]
            row.append(f"{statistics.mean(rs):8.2f}")
        print(f"{fam:22s} " + " ".join(row))
    steps = [s for agent in ("oracle", "halfway") for e in results[agent] for s in e["steps"]]  # type: ignore[union-attr]
    total = [float(s["duration_s"]) for s in steps]
    print(f"\n3. per step ({len(steps)} oracle and halfway steps)")
    print(f"step      p50 {_p(total, 50)}  p90 {_p(total, 90)}")
    for part in ("action_s", "settle_s", "state_s", "screenshot_s"):
        vals = [float(s["timing"].get(part, 0.0)) for s in steps]
        print(f"  {part[:-2]:10s} p50 {_p(vals, 50)}  p90 {_p(vals, 90)}")
    resets = [float(e["reset_s"]) for a in AGENTS for e in results[a]]  # type: ignore[arg-type]
    print(f"reset (browser start + app load) p50 {_p(resets, 50)}  p90 {_p(resets, 90)}")
    n = len(results["oracle"])
    print(f"\n4. oracle: {n} episodes in {walls['oracle']:.1f} s = "
          f"{60 * n / walls['oracle']:.1f} episodes/min at concurrency {args.concurrency}")  # fmt: skip


if __name__ == "__main__":
    main()
