"""What a simulation run adds to the report: makespan against each session's lower bound, and the
per-policy row of the ``kvharness sim`` table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
import numpy as np
from rich.table import Table

from kvharness.report.io import DeadlineSpec
from kvharness.report.metrics import Summary, session_times
from kvharness.report.records import TurnRecord

__all__ = ["PolicyRow", "bound_ratios", "policy_row", "render_rows"]


class PolicyRow(msgspec.Struct, frozen=True):
    """One row of the sim table (all times in seconds)."""

    policy: str
    cluster: str
    load: float
    sessions: int
    sessions_within_deadline: int
    goodput: float | None
    """Sessions per hour completed within their deadline."""
    ttft_p50: float | None
    ttft_p99: float | None
    bound_ratio_mean: float | None
    """Mean over completed sessions of makespan / lower bound (>= 1)."""
    bound_ratio_p90: float | None
    hit_ratio: float | None
    """Cached prompt tokens achieved / ideal."""
    imbalance: float | None
    errors: int
    preemptions: int
    turns: int
    sim_seconds: float
    wall_seconds: float
    decode_step_p50: float | None = None
    """Median engine step time (s) over steps that decode."""
    shared_prefix_share: float | None = None
    """Share of decode step time spent reading KV blocks shared within the decode batch (None
    when not measured: default attention without ``shared_stats``)."""
    attention: str = "default"
    """Decode attention kernel of the replicas (``default`` or ``cascade``)."""
    cached_ratio: float | None = None
    """Cached prompt tokens / prompt tokens."""


def bound_ratios(
    records: Sequence[TurnRecord], lower_bounds: Mapping[str, float]
) -> dict[str, float]:
    """Completed sessions' makespan / lower bound."""
    out = {}
    for s in session_times(records):
        lb = lower_bounds.get(s.session)
        if s.completed and lb:
            out[s.session] = s.makespan / lb
    return out


def policy_row(
    policy: str,
    cluster: str,
    load: float,
    summary: Summary,
    records: Sequence[TurnRecord],
    lower_bounds: Mapping[str, float],
    *,
    preemptions: int,
    sim_seconds: float,
    wall_seconds: float,
    decode_step_p50: float | None = None,
    shared_prefix_share: float | None = None,
    attention: str = "default",
) -> PolicyRow:
    ratios = bound_ratios(records, lower_bounds)
    r = np.array(list(ratios.values())) if ratios else None
    return PolicyRow(
        policy=policy,
        cluster=cluster,
        load=load,
        sessions=summary.sessions,
        sessions_within_deadline=summary.sessions_within_deadline,
        goodput=summary.goodput,
        ttft_p50=summary.ttft.p50,
        ttft_p99=summary.ttft.p99,
        bound_ratio_mean=float(r.mean()) if r is not None else None,
        bound_ratio_p90=float(np.percentile(r, 90)) if r is not None else None,
        hit_ratio=summary.cache.achieved_vs_ideal,
        imbalance=summary.imbalance,
        errors=summary.error_count,
        preemptions=preemptions,
        turns=summary.records,
        sim_seconds=sim_seconds,
        wall_seconds=wall_seconds,
        decode_step_p50=decode_step_p50,
        shared_prefix_share=shared_prefix_share,
        attention=attention,
        cached_ratio=summary.cache.achieved_ratio,
    )


_CAPTION = (
    "goodput/h: sessions per hour done within {} · in time: those sessions / all · TTFT in s · "
    "span/LB: mean session makespan / its lower bound (ideal cache, no queueing) · hit/ideal: "
    "cached prompt tokens / ideal · imbal.: max/mean prompt tokens per replica · * best goodput"
)


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render_rows(rows: Sequence[PolicyRow], deadline: DeadlineSpec, title: str) -> Table:
    """Policies as rows; the best goodput is marked."""
    best = max((r.goodput or 0.0 for r in rows), default=0.0)
    t = Table(title=title, title_justify="left", caption=_CAPTION.format(deadline.label()))
    t.add_column("policy", no_wrap=True)
    for name in (
        "goodput/h",
        "in time",
        "TTFT p50",
        "TTFT p99",
        "span/LB",
        "hit/ideal",
        "imbal.",
        "preempt",
        "errors",
    ):
        t.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        mark = " *" if best > 0 and (r.goodput or 0.0) == best else ""
        t.add_row(
            r.policy + mark,
            _f(r.goodput, ".1f"),
            f"{r.sessions_within_deadline}/{r.sessions}",
            _f(r.ttft_p50, ".3f"),
            _f(r.ttft_p99, ".2f"),
            _f(r.bound_ratio_mean, ".2f"),
            _f(r.hit_ratio, ".3f"),
            _f(r.imbalance, ".2f"),
            str(r.preemptions),
            str(r.errors),
        )
    return t
