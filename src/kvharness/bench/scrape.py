"""Server Prometheus counters read before and after a run (vLLM's prefix-cache counters).

Each target's ``/metrics`` is read through the run's own client
(:func:`kvharness.wire.vllm.metrics_text`) and summed per family by
:func:`kvharness.wire.vllm.totals`; this module keeps the run's bookkeeping of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from kvharness.wire import vllm
from kvharness.wire.http import Client

__all__ = ["MEANS", "delta", "engines", "hit_ratio", "means", "scrape_all"]

MEANS = {
    "vllm:time_to_first_token_seconds": "TTFT",
    "vllm:e2e_request_latency_seconds": "end-to-end",
    "vllm:request_time_per_output_token_seconds": "time per output token",
}
"""The engine's latency histograms whose means referee the client's figures, with their names."""


async def _scrape(client: Client, url: str) -> dict[str, float] | None:
    text = await vllm.metrics_text(client, url)
    if text is None:
        return None
    try:
        return vllm.totals(text, vllm.COUNTERS) or None
    except ValueError:
        return None


async def scrape_all(client: Client, urls: Sequence[str]) -> dict[str, dict[str, float] | None]:
    """Each target's :data:`~kvharness.wire.vllm.COUNTERS` totals, read concurrently; None for
    a target that exposes none."""
    values = await asyncio.gather(*(_scrape(client, u) for u in urls))
    return dict(zip(urls, values, strict=True))


async def engines(client: Client, urls: Sequence[str]) -> dict[str, dict[str, int] | None]:
    """What each target's ``/metrics`` says of its engine's KV cache (``block_size``,
    ``num_gpu_blocks``: vLLM's ``cache_config_info``), read concurrently; None for a target
    that says nothing of it. The digital twin (:mod:`kvharness.sim.twin`) sizes its engines
    from it."""

    async def one(url: str) -> dict[str, int] | None:
        text = await vllm.metrics_text(client, url)
        if text is None:
            return None
        info = vllm.cache_config(text)
        if info.block_size is None or info.num_gpu_blocks is None:
            return None
        return {"block_size": info.block_size, "num_gpu_blocks": info.num_gpu_blocks}

    found = await asyncio.gather(*(one(u) for u in urls))
    return dict(zip(urls, found, strict=True))


def delta(
    before: Mapping[str, Mapping[str, float] | None],
    after: Mapping[str, Mapping[str, float] | None],
) -> dict[str, dict[str, float]]:
    """Per target, counter increases over the run (targets scraped both times only)."""
    out: dict[str, dict[str, float]] = {}
    for url, b in before.items():
        a = after.get(url)
        if a is None or b is None:
            continue
        out[url] = {k: a[k] - b.get(k, 0.0) for k in a}
    return out


def hit_ratio(deltas: Mapping[str, Mapping[str, float]]) -> float | None:
    """Server-side prefix-cache hit ratio over all targets (hit tokens / queried tokens)."""
    q = sum(d.get("vllm:prefix_cache_queries", 0.0) for d in deltas.values())
    h = sum(d.get("vllm:prefix_cache_hits", 0.0) for d in deltas.values())
    return h / q if q > 0 else None


def means(deltas: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Over all targets, the mean of each :data:`MEANS` histogram over the run (the increase
    of its sum over that of its count), for the histograms that saw observations."""
    out = {}
    for name in MEANS:
        n = sum(d.get(name + "_count", 0.0) for d in deltas.values())
        if n > 0:
            out[name] = sum(d.get(name, 0.0) for d in deltas.values()) / n
    return out
