"""Server Prometheus metrics scraped before and after a run (vLLM's prefix-cache counters)."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["COUNTERS", "delta", "scrape", "scrape_all", "totals"]

COUNTERS = (
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:num_preemptions",
    "vllm:request_success",
)
"""Counter families kept (summed over their label sets); others are dropped."""


_SAMPLE = {"counter": "_total", "histogram": "_sum", "summary": "_sum"}
"""The sample that stands for a family of each type (its name plus this), where not the family
name itself."""


def totals(text: str, families: Collection[str]) -> dict[str, float]:
    """Each of ``families`` (metric family names, e.g. ``vllm:prompt_tokens``) found in
    Prometheus exposition ``text``, summed over its label sets: a counter's total, a histogram's
    (or summary's) sum of observations, a gauge's value. Raises ValueError on text that is not
    Prometheus exposition."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name in families:
            sample = fam.name + _SAMPLE.get(fam.type, "")
            total = sum(s.value for s in fam.samples if s.name == sample)
            out[fam.name] = out.get(fam.name, 0.0) + total
    return out


def scrape(
    url: str, timeout: float = 5.0, families: Collection[str] = COUNTERS
) -> dict[str, float] | None:
    """:func:`totals` of ``families`` at ``url``/metrics; None when the server exposes none."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout) as resp:
            text = resp.read().decode("utf-8", errors="replace")
        return totals(text, families) or None
    except (urllib.error.URLError, OSError, ValueError):
        return None


async def scrape_all(urls: Sequence[str]) -> dict[str, dict[str, float] | None]:
    """Scrape every target concurrently (in threads; a run's event loop is not blocked)."""
    values = await asyncio.gather(*(asyncio.to_thread(scrape, u) for u in urls))
    return dict(zip(urls, values, strict=True))


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
