"""Capacity at an SLO: the most concurrent agent sessions a deployment holds within a tier.

The question a team serving agents asks first is how many agents one replica holds. A *tier* is
a pair of per-turn targets, as Artificial Analysis' AgentPerf defines its SLO tiers: time to
first token and output speed. A run **meets** a tier when the 90th percentile of its turns' time
to first token is within ``ttft_p90_s`` and the 10th percentile of their output speed (tokens
after the first over the time they took, a turn of one token excluded) is at least
``speed_tok_s``: nine turns in ten get both.

:func:`search` finds the largest concurrency that meets a tier with runs at chosen
concurrencies (``evaluate(n)``: a live bench run, or the twin's simulation of one): it doubles
from 1 until a run fails, then bisects between the last that passed and the first that failed,
assuming (as one may for a closed-loop load) that more sessions in flight never serve each turn
faster. O(log max) runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kvharness.errors import UserError
from kvharness.report.records import TurnRecord

__all__ = ["TIERS", "Point", "Tier", "measure", "parse_tier", "search"]


@dataclass(frozen=True, slots=True)
class Tier:
    """Per-turn targets: TTFT p90 at most ``ttft_p90_s`` seconds, output speed p10 at least
    ``speed_tok_s`` tokens per second."""

    name: str
    ttft_p90_s: float
    speed_tok_s: float

    def __post_init__(self) -> None:
        if not (self.ttft_p90_s > 0 and self.speed_tok_s > 0):
            raise ValueError("a tier's TTFT and speed targets must be > 0")

    def __str__(self) -> str:
        return f"{self.name} (TTFT p90 <= {self.ttft_p90_s:g} s, speed p10 >= {self.speed_tok_s:g} tok/s)"


TIERS = {
    t.name: t
    for t in (
        Tier("relaxed", 10.0, 10.0),
        Tier("standard", 5.0, 20.0),
        Tier("fast", 2.0, 50.0),
        Tier("premium", 1.0, 100.0),
    )
}
"""Named tiers for GPU deployments serving agents (a spread like AgentPerf's, whose per-model
thresholds run from about 20 to 180 tokens per second); give your own with
``ttft=S,speed=T``."""


def parse_tier(spec: str) -> Tier:
    """A tier by name (:data:`TIERS`) or as ``ttft=SECONDS,speed=TOKENS_PER_S``."""
    if spec in TIERS:
        return TIERS[spec]
    fields: dict[str, float] = {}
    for part in spec.split(","):
        key, _, value = part.partition("=")
        try:
            fields[key.strip()] = float(value)
        except ValueError:
            fields = {}
            break
    if set(fields) != {"ttft", "speed"}:
        raise UserError(
            f"bad tier {spec!r}: name one of {', '.join(TIERS)} or give ttft=SECONDS,speed=TOK_S"
        )
    try:
        return Tier(spec, fields["ttft"], fields["speed"])
    except ValueError as err:
        raise UserError(f"bad tier {spec!r}: {err}") from None


@dataclass(frozen=True, slots=True)
class Point:
    """One concurrency tried: its turns' TTFT p90 and output speed p10, and whether it met the
    tier (a run with failed turns does not)."""

    concurrency: int
    ttft_p90_s: float
    speed_p10_tok_s: float
    turns: int
    failed: int
    meets: bool


def measure(concurrency: int, records: Sequence[TurnRecord], tier: Tier) -> Point:
    """The :class:`Point` of a run's ``records`` against ``tier``."""
    ok = [r for r in records if r.ok and r.ttft is not None]
    failed = sum(1 for r in records if not r.ok)
    if not ok:
        return Point(concurrency, float("inf"), 0.0, 0, failed, False)
    ttft = float(np.percentile([r.ttft for r in ok], 90))
    speeds = [1.0 / r.itl for r in ok if r.itl]
    speed = float(np.percentile(speeds, 10)) if speeds else 0.0
    meets = failed == 0 and ttft <= tier.ttft_p90_s and speed >= tier.speed_tok_s
    return Point(concurrency, ttft, speed, len(ok), failed, meets)


def search(
    evaluate: Callable[[int], Point], *, max_concurrency: int = 256
) -> tuple[int, list[Point]]:
    """The largest concurrency in ``[1, max_concurrency]`` whose run meets the tier (0 when even
    one session does not), and every point tried, in the order tried (see the module
    docstring)."""
    if max_concurrency < 1:
        raise ValueError("max_concurrency must be >= 1")
    points: list[Point] = []

    def run(n: int) -> bool:
        p = evaluate(n)
        points.append(p)
        return p.meets

    good, bad = 0, max_concurrency + 1
    n = 1
    while n <= max_concurrency:
        if run(n):
            good = n
            n *= 2
        else:
            bad = n
            break
    else:
        if good < max_concurrency and run(max_concurrency):
            return max_concurrency, points
        if good < max_concurrency:
            bad = max_concurrency
    while bad - good > 1:
        mid = (good + bad) // 2
        if run(mid):
            good = mid
        else:
            bad = mid
    return good, points
