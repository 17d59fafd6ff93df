"""Workload statistics: sizes, gaps, per-turn appends, and the ideal prefix-cache hit ratio.

The ideal hit ratio is what an infinite prefix cache on one replica would reuse, visiting turns in
the workload's nominal order (:meth:`Workload.nominal_order`). Token-weighted: cached tokens over
prompt tokens. Block-weighted: blocks found over blocks, a prompt's partial last block counting as
one block.

Images (:class:`~kvharness.workload.images.Image`) are counted apart: their placeholder tokens, and
how many of the tokens that ideal cache misses are placeholders rather than text. A prompt's miss
is everything after its cached prefix, so a screenshot seen before is missed again whenever the
prompt changed before it (keep-last-K rewrites, or the same screen at a new position).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from kvharness.workload.chain import shared_prefix_tokens
from kvharness.workload.ideal import IdealCache
from kvharness.workload.model import Workload

__all__ = ["Distribution", "WorkloadStats", "workload_stats"]

_QUANTILES = (50, 90, 99)


class Distribution(msgspec.Struct, frozen=True):
    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray[Any, Any]) -> Distribution:
        a = np.asarray(values, dtype=float)
        if a.size == 0:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0)
        p50, p90, p99 = (float(x) for x in np.percentile(a, _QUANTILES))
        return cls(int(a.size), float(a.mean()), p50, p90, p99, float(a.max()))


class WorkloadStats(msgspec.Struct, frozen=True):
    name: str
    format: str
    """The format it was read from (``synthetic`` for the generator)."""
    sharing: str
    """How prefix sharing is known: ``hashes``, ``content`` or ``none`` (the format records
    lengths only, so no prompt shares a block and the ideal hit ratio says nothing)."""
    block_size: int
    requests: int
    sessions: int
    multi_turn_sessions: int
    turns_per_session: Distribution
    turns_per_multi_turn_session: Distribution
    input_tokens: Distribution
    output_tokens: Distribution
    gap_seconds: Distribution
    """Gaps before turns 1..n of each session (think/tool time)."""
    append_tokens: Distribution
    """Prompt tokens of turn i beyond its shared prefix with turn i-1 of the same session."""
    prompt_tokens_by_turn: list[float]
    """Median prompt tokens at turn index 0, 1, 2, ... (up to 32 indices)."""
    ideal_hit_ratio_tokens: float
    ideal_hit_ratio_blocks: float
    total_input_tokens: int
    total_output_tokens: int
    duration_seconds: float
    """Span of session start times."""
    image_tokens: int
    """Image placeholder tokens summed over all prompts (a screenshot counts in every prompt that
    holds it, as prompt tokens do); 0 for a text-only workload."""
    image_token_share: float
    """``image_tokens / total_input_tokens``."""
    images_per_turn: Distribution
    """Images in each prompt (all of them, not only the new ones)."""
    distinct_images: int
    """Distinct image content hashes."""
    ideal_miss_tokens: int
    """Prompt tokens the ideal cache misses: ``total_input_tokens`` minus its hits."""
    ideal_miss_image_tokens: int
    """Of those, image placeholder tokens."""
    ideal_miss_text_tokens: int
    """Of those, every other token (``ideal_miss_tokens - ideal_miss_image_tokens``)."""
    ideal_miss_seen_image_tokens: int
    """Of the missed image tokens, those of images already seen in an earlier prompt (or earlier
    in the same one): their KV is recomputed because the prompt changed before them (keep-last-K
    rewrites, a repeated screen at a new position) or, a few tokens each, because they end in the
    previous prompt's partial last block. A vision encoder cache keyed by content hash would spare
    their encoding, not their prefill."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


def workload_stats(workload: Workload, max_turn_index: int = 32) -> WorkloadStats:
    """Compute :class:`WorkloadStats`; O(total blocks) time."""
    cache = IdealCache()
    hit_tokens = hit_blocks = total_tokens = total_blocks = 0
    miss_image = miss_seen = 0
    seen: set[int] = set()
    for _, _, turn in workload.nominal_order():
        hit = cache.visit(turn.input)
        hit_tokens += hit.tokens
        hit_blocks += hit.blocks
        total_tokens += turn.input.num_tokens
        total_blocks += len(turn.input.hashes)
        for im in turn.images:
            missed = max(0, im.end - max(im.offset, hit.tokens))
            miss_image += missed
            if im.hash in seen:
                miss_seen += missed
            seen.add(im.hash)

    inputs, outputs, gaps, appends = [], [], [], []
    by_turn: list[list[int]] = [[] for _ in range(max_turn_index)]
    for s in workload.sessions:
        prev = None
        for i, t in enumerate(s.turns):
            inputs.append(t.input.num_tokens)
            outputs.append(t.output_tokens)
            if i < max_turn_index:
                by_turn[i].append(t.input.num_tokens)
            if prev is not None:
                gaps.append(t.gap)
                appends.append(t.input.num_tokens - shared_prefix_tokens(prev.input, t.input))
            prev = t
    image_tokens = sum(t.image_tokens for _, _, t in workload.turns())
    images_per_turn = [len(t.images) for _, _, t in workload.turns()]
    lengths = [len(s.turns) for s in workload.sessions]
    starts = workload.arrival.start_times(workload.sessions)
    return WorkloadStats(
        name=workload.name,
        format=str(workload.meta.get("format", workload.meta.get("source", "unknown"))),
        sharing=str(workload.meta.get("sharing", "hashes")),
        block_size=workload.block_size,
        requests=len(inputs),
        sessions=len(workload.sessions),
        multi_turn_sessions=sum(1 for n in lengths if n > 1),
        turns_per_session=Distribution.of(lengths),
        turns_per_multi_turn_session=Distribution.of([n for n in lengths if n > 1]),
        input_tokens=Distribution.of(inputs),
        output_tokens=Distribution.of(outputs),
        gap_seconds=Distribution.of(gaps),
        append_tokens=Distribution.of(appends),
        prompt_tokens_by_turn=[float(np.median(v)) for v in by_turn if v],
        ideal_hit_ratio_tokens=hit_tokens / total_tokens if total_tokens else 0.0,
        ideal_hit_ratio_blocks=hit_blocks / total_blocks if total_blocks else 0.0,
        total_input_tokens=sum(inputs),
        total_output_tokens=sum(outputs),
        duration_seconds=(max(starts) - min(starts)) if starts else 0.0,
        image_tokens=image_tokens,
        image_token_share=image_tokens / total_tokens if total_tokens else 0.0,
        images_per_turn=Distribution.of(images_per_turn),
        distinct_images=len(seen),
        ideal_miss_tokens=total_tokens - hit_tokens,
        ideal_miss_image_tokens=miss_image,
        ideal_miss_text_tokens=total_tokens - hit_tokens - miss_image,
        ideal_miss_seen_image_tokens=miss_seen,
    )
