"""The speed part of a performance task's grade: a speedup with a confidence interval, and when to
stop measuring it.

A grading times the reference and the candidate in pairs of fresh processes (one *round*); each
round gives one ratio ``reference time / candidate time``. Ratios multiply, so they are averaged on
a log scale: the estimate is the geometric mean, and its 95% interval is Student's t interval of
the mean log ratio. The score pays only what the rounds prove: the interval's lower end, on a log
scale between ``TimingPolicy.min_speedup`` (score 0) and the task's target speedup (score 1). A
wide interval (a noisy machine, few rounds) pays less than a tight one at the same estimate.

Within a round the two sides' calls are taken in turn, and which side goes first alternates call
by call and round by round (a grading stops only after an even number of rounds), so that
whatever a moment of the machine costs (another process's burst, a CPU clocking up, a cold
cache) falls on each side alike. What is left is chance: one grading in forty has its interval
wholly above the truth. ``min_speedup`` (5%) keeps that from paying a candidate no faster than
the reference: the spread of an identical pair on this machine is a few percent
(``benchmarks/perf_env.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Speedup", "TimingPolicy", "t975"]

_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
"""The 97.5% quantile of Student's t with 1..30 degrees of freedom."""


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (the table to 30, then
    Cornish-Fisher's first two terms around the normal quantile: within 0.001 from there on)."""
    if df < 1:
        raise ValueError("need at least one degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True, slots=True)
class Speedup:
    """Reference time / candidate time, one ratio per round."""

    ratios: tuple[float, ...]

    def _logs(self) -> tuple[float, float]:
        """Mean and 95% half-width of the log ratios (half-width inf for one round)."""
        n = len(self.ratios)
        if n == 0:
            raise ValueError("a speedup needs at least one round")
        logs = [math.log(r) for r in self.ratios]
        mean = sum(logs) / n
        if n == 1:
            return mean, math.inf
        var = sum((x - mean) ** 2 for x in logs) / (n - 1)
        return mean, t975(n - 1) * math.sqrt(var / n)

    @property
    def rounds(self) -> int:
        return len(self.ratios)

    @property
    def estimate(self) -> float:
        """The geometric mean ratio."""
        return math.exp(self._logs()[0])

    @property
    def low(self) -> float:
        """Lower end of the 95% interval (0 for one round)."""
        mean, half = self._logs()
        return math.exp(mean - half) if math.isfinite(half) else 0.0

    @property
    def high(self) -> float:
        """Upper end of the 95% interval (inf for one round)."""
        mean, half = self._logs()
        return math.exp(mean + half) if math.isfinite(half) else math.inf

    @property
    def noise(self) -> float:
        """The interval's relative half-width, ``exp(half) - 1``: the smallest change of speed
        these rounds could tell apart (the grading's noise floor)."""
        return math.exp(self._logs()[1]) - 1.0


@dataclass(frozen=True, slots=True)
class TimingPolicy:
    """How long a grading measures, and how a speedup becomes a score.

    ``min_rounds`` / ``max_rounds``: rounds (pairs of fresh processes) at least / at most, both
    even. ``rel_ci``: stop once the 95% interval's relative half-width is at most this.
    ``budget_s``: stop after this many seconds of timing, whatever the interval. A grading also
    stops once the interval lies wholly above the target (score 1 is sure) or wholly below
    ``min_speedup`` (score 0 is). ``min_speedup``: the speedup that scores 0; less is noise.
    """

    min_rounds: int = 4
    max_rounds: int = 8
    rel_ci: float = 0.1
    budget_s: float = 90.0
    min_speedup: float = 1.05

    def __post_init__(self) -> None:
        if self.min_rounds < 2 or self.min_rounds % 2:
            raise ValueError("min_rounds must be even and >= 2 (one round has no interval)")
        if self.max_rounds < self.min_rounds or self.max_rounds % 2:
            raise ValueError("max_rounds must be even and >= min_rounds")
        if not self.min_speedup >= 1:
            raise ValueError("min_speedup must be >= 1")
        if not self.rel_ci > 0:
            raise ValueError("rel_ci must be > 0")
        if not self.budget_s > 0:
            raise ValueError("budget_s must be > 0")

    def settled(self, s: Speedup, *, target: float) -> bool:
        """Whether more rounds would not change what the grading can say."""
        if s.rounds < self.min_rounds or s.rounds % 2:
            return False
        if s.rounds >= self.max_rounds:
            return True
        return s.noise <= self.rel_ci or s.low >= target or s.high <= self.min_speedup

    def score(self, s: Speedup, *, target: float) -> float:
        """``log(low / min_speedup) / log(target / min_speedup)`` clamped to [0, 1]; ``target``
        above ``min_speedup``."""
        floor = self.min_speedup
        if not target > floor:
            raise ValueError(f"the target speedup must be > {floor:g}")
        low = s.low
        if low <= floor:
            return 0.0
        return min(1.0, math.log(low / floor) / math.log(target / floor))
