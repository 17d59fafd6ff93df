"""Check task families through the real browser: the oracle solves every variant (reward 1.0),
noop earns nothing, and an agent stopped half way earns part of the milestones.

    python -m kvharness.env.web.verify [FAMILY_OR_MODULE ...] [--seeds 0 1 2] [--shots DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from pathlib import Path

from kvharness.env.web.apps import FAMILIES
from kvharness.env.web.env import WebConfig
from kvharness.env.web.play import play
from kvharness.env.web.task import Family

__all__ = ["main", "verify_family"]


def _family(name: str) -> Family:
    if name in FAMILIES:
        return FAMILIES[name]
    module = importlib.import_module(f"kvharness.env.web.apps.{name.replace('-', '_')}")
    fam: Family = module.FAMILY
    return fam


async def verify_family(
    fam: Family, seeds: list[int], shots: Path | None, config: WebConfig
) -> list[str]:
    """Problems found with ``fam``'s variants (empty: all good); prints one line per variant."""
    problems = []
    for seed in seeds:
        task = fam.build(seed)
        oracle = await play(task, "oracle", config, shots=shots)
        noop = await play(task, "noop", config)
        half = await play(task, "halfway", config, shots=shots)
        errors = [s.error for s in oracle.steps if s.error]
        print(
            f"{task.id:28s} oracle {oracle.reward:.2f} ({len(oracle.steps)} steps, "
            f"{oracle.wall_s:.1f} s)  noop {noop.reward:.2f}  halfway {half.reward:.2f}  "
            f"milestones {len(task.milestones)}"
        )
        if oracle.reward != 1.0:
            problems.append(
                f"{task.id}: oracle reward {oracle.reward:.2f}, reached {oracle.milestones}; "
                f"errors: {errors}"
            )
        if noop.reward != 0.0:
            problems.append(f"{task.id}: noop reward {noop.reward:.2f} ({noop.milestones})")
        if not 0.0 < half.reward < 1.0:
            problems.append(f"{task.id}: halfway reward {half.reward:.2f} ({half.milestones})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("families", nargs="*", help="family names or module names (default: all)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--shots", type=Path, help="write every step's screenshot here")
    parser.add_argument("--unsafe", action="store_true", help="run the browser without bwrap")
    args = parser.parse_args(argv)
    fams = [_family(n) for n in args.families] or list(FAMILIES.values())
    config = WebConfig(unsafe=args.unsafe, max_steps=200)

    async def go() -> list[str]:
        out: list[str] = []
        for fam in fams:
            out += await verify_family(fam, args.seeds, args.shots, config)
        return out

    problems = asyncio.run(go())
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
