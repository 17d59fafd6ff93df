"""What a simulation run adds to the report: makespan against each session's lower bound, and the
per-policy row of the ``kvharness sim`` table.

For a workload with images, a row also carries :class:`VisionStats` (``vision`` in ``sim.json``;
absent for a text-only workload, whose rows and table are as they were): the image tokens sent,
the vision encoder's share of GPU time, encoder cache hits, and TTFT split into queue, encoder
and prefill; the table then gains four columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec
import numpy as np
from rich.table import Table

from kvharness.report.io import DeadlineSpec
from kvharness.report.metrics import Summary, session_times
from kvharness.report.records import TurnRecord

if TYPE_CHECKING:
    from kvharness.sim.simulator import SimResult

__all__ = ["PolicyRow", "VisionStats", "bound_ratios", "policy_row", "render_rows", "vision_stats"]


class VisionStats(msgspec.Struct, frozen=True):
    """What images cost a run (times in seconds; means over completed turns)."""

    images: int
    """Images in the prompts sent to replicas (one per prompt it appears in)."""
    image_tokens: int
    """Their placeholder tokens."""
    image_token_share: float | None
    """Image tokens / prompt tokens sent."""
    images_encoded: int
    """Images the vision encoders computed."""
    encoder_cache_hits: int
    """Images found in a replica's encoder cache instead of being encoded."""
    images_prefix_cached: int
    """Images wholly inside a prefix-cache hit when their request was first scheduled (free)."""
    encoder_share: float | None
    """Vision-encoder time / busy time, all replicas together."""
    ttft_queue_mean: float | None
    """Sent to first scheduled."""
    ttft_encoder_mean: float | None
    """Encoder time the turn's own images took."""
    ttft_prefill_mean: float | None
    """The rest of TTFT: the turn's prefill steps (with whatever they batched) but its encoding."""
    ttft_encoder_share: float | None
    """Encoder time / TTFT, summed over completed turns."""


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
    vision: VisionStats | msgspec.UnsetType = msgspec.UNSET
    """Image costs (:class:`VisionStats`); unset, and absent from JSON, without images."""


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
    vision: VisionStats | None = None,
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
        vision=msgspec.UNSET if vision is None else vision,
    )


def vision_stats(result: SimResult) -> VisionStats | None:
    """The image costs of a run (None when its workload has no images). O(records)."""
    if not result.has_images:
        return None
    reps = result.replicas
    prompt = sum(r.prompt_tokens for r in result.records if r.replica)
    enc_of = result.turn_encoder_seconds
    queue = enc = ttft = 0.0
    n = 0
    for r in result.records:
        t = r.ttft
        if t is None or r.scheduled is None or not r.ok:
            continue
        n += 1
        ttft += t
        queue += r.scheduled - r.sent
        enc += enc_of.get((r.session, r.turn), 0.0)
    return VisionStats(
        images=result.images,
        image_tokens=result.image_tokens,
        image_token_share=result.image_tokens / prompt if prompt else None,
        images_encoded=sum(r.images_encoded for r in reps),
        encoder_cache_hits=sum(r.encoder_cache_hits for r in reps),
        images_prefix_cached=sum(r.images_prefix_cached for r in reps),
        encoder_share=result.encoder_share,
        ttft_queue_mean=queue / n if n else None,
        ttft_encoder_mean=enc / n if n else None,
        ttft_prefill_mean=(ttft - queue - enc) / n if n else None,
        ttft_encoder_share=enc / ttft if ttft else None,
    )


_CAPTION = (
    "goodput/h: sessions per hour done within {} · in time: those sessions / all · TTFT in s · "
    "span/LB: mean session makespan / its lower bound (ideal cache, no queueing) · hit/ideal: "
    "cached prompt tokens / ideal · imbal.: max/mean prompt tokens per replica · * best goodput"
)
_VISION_CAPTION = (
    " · img tok: image tokens / prompt tokens · enc/GPU: vision-encoder time / busy time · "
    "enc/TTFT: encoder time / TTFT · enc hits: images found in the encoder cache / encoded"
)


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def render_rows(rows: Sequence[PolicyRow], deadline: DeadlineSpec, title: str) -> Table:
    """Policies as rows; the best goodput is marked."""
    best = max((r.goodput or 0.0 for r in rows), default=0.0)
    images = any(isinstance(r.vision, VisionStats) for r in rows)
    caption = _CAPTION.format(deadline.label()) + (_VISION_CAPTION if images else "")
    t = Table(title=title, title_justify="left", caption=caption)
    t.add_column("policy", no_wrap=True)
    names = [
        "goodput/h",
        "in time",
        "TTFT p50",
        "TTFT p99",
        "span/LB",
        "hit/ideal",
        "imbal.",
        "preempt",
        "errors",
    ]
    if images:
        names += ["img tok", "enc/GPU", "enc/TTFT", "enc hits"]
    for name in names:
        t.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        mark = " *" if best > 0 and (r.goodput or 0.0) == best else ""
        cells = [
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
        ]
        if images:
            v = r.vision
            if isinstance(v, VisionStats):
                cells += [
                    _f(v.image_token_share, ".2f"),
                    _f(v.encoder_share, ".3f"),
                    _f(v.ttft_encoder_share, ".3f"),
                    f"{v.encoder_cache_hits}/{v.images_encoded}",
                ]
            else:
                cells += ["-"] * 4
        t.add_row(*cells)
    return t
