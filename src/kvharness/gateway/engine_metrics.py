"""The replicas' own Prometheus metrics, relayed through the gateway's ``/metrics``.

A client that scrapes the gateway (``kvharness bench`` does, before and after a run) then sees
each engine's counters, such as vLLM's ``vllm:prefix_cache_queries`` / ``_hits``, as one family
with a ``replica`` label naming the replica's URL (an engine's own ``replica`` label is kept as
``exported_replica``, as Prometheus does). Summing a family over its label sets gives the
cluster's total. Families named like the gateway's own (``kvharness_gateway_*``) are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from kvharness.wire.vllm import families

__all__ = ["relabel"]

log = logging.getLogger(__name__)

SCRAPED = "kvharness_gateway_replica_metrics_scraped"
"""Gauge per replica: 1 when its ``/metrics`` was read for this scrape, else 0."""


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def relabel(texts: Sequence[tuple[str, str | None]], skip_prefix: str) -> bytes:
    """Prometheus exposition of every family in the ``(replica URL, /metrics text)`` pairs, each
    sample labelled by its replica, plus :data:`SCRAPED`; families whose name starts with
    ``skip_prefix`` are dropped, and a text that does not parse counts as not scraped."""
    merged: dict[str, Metric] = {}
    scraped = Metric(SCRAPED, "1 when the replica's /metrics was read for this scrape", "gauge")
    for url, text in texts:
        families = _parse(url, text)
        scraped.add_sample(SCRAPED, {"replica": url}, 0.0 if families is None else 1.0)
        for fam in families or ():
            if fam.name.startswith(skip_prefix) or not fam.samples:
                continue
            out = merged.get(fam.name)
            if out is None:
                out = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            elif out.type != fam.type:
                continue
            for s in fam.samples:
                labels = dict(s.labels)
                if "replica" in labels:
                    labels["exported_replica"] = labels.pop("replica")
                labels["replica"] = url
                out.add_sample(s.name, labels, s.value, s.timestamp, s.exemplar)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([scraped, *merged.values()]))
    return generate_latest(registry)


def _parse(url: str, text: str | None) -> list[Metric] | None:
    if text is None:
        return None
    try:
        return families(text)
    except ValueError as err:
        log.warning("replica %s: /metrics is not Prometheus text (%s); not relayed", url, err)
        return None
