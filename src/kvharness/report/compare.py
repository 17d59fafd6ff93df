"""Runs side by side: the metrics that matter week after week, their deltas against a baseline, and
whether each change is better or worse. Shared by the terminal table, the HTML report and JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

import msgspec

from kvharness.report.metrics import Summary

__all__ = ["KEY_METRICS", "Comparison", "MetricDelta", "MetricSpec", "compare", "fmt_value"]

Better = Literal["higher", "lower", "none"]
Verdict = Literal["baseline", "better", "worse", "same", "n/a"]


class MetricSpec(NamedTuple):
    key: str
    label: str
    unit: str
    """``s`` (seconds), ``ratio`` (0..1, shown as a percentage), ``/h``, ``/s``, ``count``
    or ``x``."""
    better: Better
    """Which way is an improvement; ``none`` for properties of the workload, not of the serving."""
    get: Callable[[Summary], float | None]
    short: str = ""
    """Column heading where space is short (one row per run); defaults to ``label``."""


def _errors(s: Summary) -> float:
    return float(s.error_count)


def _part(*names: str) -> Callable[[Summary], float | None]:
    """Mean seconds a completed session spent in the given parts of its breakdown."""

    def get(s: Summary) -> float | None:
        b = s.breakdown
        return None if b is None else sum(getattr(b, n) for n in names)

    return _sessions(get)


def _sessions(get: Callable[[Summary], float | None]) -> Callable[[Summary], float | None]:
    """``get``, for a run of agent sessions only (None for a run of requests, where session
    figures mean nothing: :attr:`Summary.session_view`)."""
    return lambda s: get(s) if s.session_view else None


def _throughput(name: str) -> Callable[[Summary], float | None]:
    return lambda s: None if s.throughput is None else getattr(s.throughput, name)


KEY_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("goodput", "goodput (sessions/h in deadline)", "/h", "higher",
               _sessions(lambda s: s.goodput), "goodput/h"),
    MetricSpec("sessions_completed", "sessions completed", "count", "higher",
               _sessions(lambda s: float(s.sessions_completed)), "completed"),
    MetricSpec("requests_per_s", "request throughput (req/s)", "/s", "higher",
               _throughput("requests_per_s"), "req/s"),
    MetricSpec("output_tokens_per_s", "output token throughput (tok/s)", "/s", "higher",
               _throughput("output_tokens_per_s"), "out tok/s"),
    MetricSpec("ttft_p50", "TTFT p50", "s", "lower", lambda s: s.ttft.p50),
    MetricSpec("ttft_p90", "TTFT p90", "s", "lower", lambda s: s.ttft.p90),
    MetricSpec("ttft_p99", "TTFT p99", "s", "lower", lambda s: s.ttft.p99),
    MetricSpec("itl_mean", "inter-token latency mean", "s", "lower", lambda s: s.itl.mean,
               "ITL mean"),
    MetricSpec("itl_p90", "inter-token latency p90", "s", "lower", lambda s: s.itl.p90,
               "ITL p90"),
    MetricSpec("e2e_p50", "end-to-end p50", "s", "lower", lambda s: s.e2e.p50, "E2E p50"),
    MetricSpec("makespan_p50", "session makespan p50", "s", "lower",
               _sessions(lambda s: s.makespan.p50), "makespan p50"),
    MetricSpec("makespan_p90", "session makespan p90", "s", "lower",
               _sessions(lambda s: s.makespan.p90), "makespan p90"),
    MetricSpec("session_server_wait", "session: queue+prefill (mean)", "s", "lower",
               _part("queue", "prefill", "queue_prefill"), "queue+prefill"),
    MetricSpec("session_decode", "session: decode (mean)", "s", "lower", _part("decode"),
               "decode"),
    MetricSpec("session_failed", "session: lost to faults (mean)", "s", "lower",
               _part("failed"), "faults"),
    MetricSpec("cached_ratio", "cached / prompt tokens", "ratio", "higher",
               lambda s: s.cache.achieved_ratio, "cached"),
    MetricSpec("ideal_ratio", "ideal cached / prompt", "ratio", "none",
               lambda s: s.cache.ideal_ratio, "ideal"),
    MetricSpec("achieved_vs_ideal", "cached vs ideal", "ratio", "higher",
               lambda s: s.cache.achieved_vs_ideal, "vs ideal"),
    MetricSpec("errors", "errors (failed attempts)", "count", "lower", _errors, "errors"),
    MetricSpec("lag_p99", "client send lag p99", "s", "lower", lambda s: s.lag.p99, "lag p99"),
    MetricSpec("imbalance", "replica load max/mean", "x", "lower", lambda s: s.imbalance,
               "imbalance"),
)  # fmt: skip


class MetricDelta(msgspec.Struct, frozen=True):
    """One metric across runs; ``delta``/``pct`` are against the baseline run (None there)."""

    key: str
    label: str
    short: str
    unit: str
    better: str
    values: list[float | None]
    delta: list[float | None]
    pct: list[float | None]
    """Relative change in percent; None when the baseline value is 0 or missing."""
    verdict: list[str]


class Comparison(msgspec.Struct, frozen=True):
    baseline: int
    labels: list[str]
    deadline: str
    """The baseline's deadline, in words (``600 s``, ``1.5x lower bound``, ``none``)."""
    tolerance: float
    metrics: list[MetricDelta]
    warnings: list[str]

    def to_json(self) -> bytes:
        return msgspec.json.format(msgspec.json.encode(self), indent=2)


def _verdict(base: float | None, v: float | None, better: Better, tolerance: float) -> Verdict:
    if base is None or v is None:
        return "n/a"
    if abs(v - base) <= tolerance * abs(base) or v == base:
        return "same"
    if better == "none":
        return "n/a"
    return "better" if (v > base) == (better == "higher") else "worse"


def compare(
    summaries: Sequence[Summary], *, baseline: int = 0, tolerance: float = 0.01
) -> Comparison:
    """Compare runs against ``summaries[baseline]``; a change within ``tolerance`` (relative, 0.01
    = 1%) of the baseline is ``same``. Warns when the runs cannot be compared like for like."""
    if not summaries:
        raise ValueError("nothing to compare")
    if not 0 <= baseline < len(summaries):
        raise ValueError(f"baseline {baseline} is not one of the {len(summaries)} runs")
    base = summaries[baseline]
    metrics = []
    for spec in KEY_METRICS:
        values = [spec.get(s) for s in summaries]
        b = values[baseline]
        delta: list[float | None] = []
        pct: list[float | None] = []
        verdict: list[str] = []
        for i, v in enumerate(values):
            if i == baseline:
                delta.append(None)
                pct.append(None)
                verdict.append("baseline")
                continue
            delta.append(None if v is None or b is None else v - b)
            pct.append(None if v is None or not b else 100.0 * (v - b) / abs(b))
            verdict.append(_verdict(b, v, spec.better, tolerance))
        metrics.append(
            MetricDelta(
                spec.key,
                spec.label,
                spec.short or spec.label,
                spec.unit,
                spec.better,
                values,
                delta,
                pct,
                verdict,
            )
        )
    warnings = []
    for s in summaries:
        if s.deadline_text != base.deadline_text:
            warnings.append(
                f"{s.label}: deadline {s.deadline_text} differs from {base.label}'s "
                f"{base.deadline_text}; goodput is not comparable"
            )
        if s.overlapping_turns:
            warnings.append(
                f"{s.label}: {s.overlapping_turns} turns went out before their session's previous"
                " turn ended (not closed-loop): its makespan and goodput are not agent sessions'"
            )
        bi, si = base.cache.ideal_ratio, s.cache.ideal_ratio
        if bi is not None and si is not None and abs(bi - si) > 0.02:
            warnings.append(
                f"{s.label}: ideal cache ratio {si:.1%} vs {bi:.1%} in {base.label}:"
                " the runs may not have replayed the same workload"
            )
    return Comparison(
        baseline=baseline,
        labels=[s.label for s in summaries],
        deadline=base.deadline_text,
        tolerance=tolerance,
        metrics=metrics,
        warnings=warnings,
    )


def fmt_value(v: float | None, unit: str) -> str:
    """Human form of a value: seconds as ms below 1 s, ratios as percent."""
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1e3:.1f} ms" if abs(v) < 1 else f"{v:.2f} s"
    if unit == "ratio":
        return f"{100 * v:.1f}%"
    if unit == "count":
        return f"{v:.0f}"
    if unit == "x":
        return f"{v:.2f}x"
    if unit == "/s":
        return f"{v:.2f}"
    return f"{v:.1f}{unit}"
