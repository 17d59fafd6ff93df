"""Prometheus metrics of one gateway (its own registry, so several can live in one process).

Counters are bumped on the request path; gauges that mirror state (in flight, health, index size,
KV-event lag) are read at scrape time by a collector, so the hot path does not maintain them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kvharness.gateway.kv_subscriber import KVEventSubscriber
from kvharness.gateway.prompt_hasher import HasherStats
from kvharness.routing.base import ReplicaState
from kvharness.routing.index import PrefixIndex

__all__ = ["GatewayMetrics", "ReplicaView"]

PREFIX = "kvharness_gateway_"


@dataclass(slots=True)
class ReplicaView:
    """What the collector reads per replica at scrape time."""

    url: str
    state: ReplicaState
    events: KVEventSubscriber | None
    healthy: bool
    """The router's flag (:attr:`kvharness.gateway.router.Router.healthy`)."""


class _StateCollector(Collector):
    def __init__(
        self,
        replicas: Callable[[], Sequence[ReplicaView]],
        inflight: Callable[[], Sequence[int]],
        index: PrefixIndex,
        hasher: Callable[[], HasherStats],
    ) -> None:
        self._replicas = replicas
        self._inflight = inflight
        self._index = index
        self._hasher = hasher

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        now = time.time()
        reps = self._replicas()
        inflight = self._inflight()

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(PREFIX + name, doc, labels=["replica"])

        up = gauge("replica_healthy", "1 when the replica passes health checks")
        fl = gauge("inflight_requests", "Requests the gateway has in flight on the replica")
        pend = gauge("pending_prefill_tokens", "Estimated prompt tokens waiting to be prefilled")
        rate = gauge("prefill_tokens_per_second", "Measured prefill rate (EWMA), tokens/s")
        size = gauge("index_blocks", "Blocks the prefix index believes the replica caches")
        lag = gauge(
            "kv_event_lag_seconds", "Wall time from the last event batch's stamp to receipt"
        )
        age = gauge("kv_event_age_seconds", "Seconds since the last event batch was received")
        ev = CounterMetricFamily(PREFIX + "kv_events", "KV events received", labels=["replica"])
        gaps = CounterMetricFamily(
            PREFIX + "kv_event_gaps", "Sequence gaps in KV events", labels=["replica"]
        )
        stale = CounterMetricFamily(
            PREFIX + "kv_event_stale_marks", "Times the replica's index was dropped as stale",
            labels=["replica"],
        )  # fmt: skip
        late = CounterMetricFamily(
            PREFIX + "kv_event_late_joins",
            "Times the gateway joined the replica's event stream after batches it did not get",
            labels=["replica"],
        )
        missed = CounterMetricFamily(
            PREFIX + "kv_event_batches_missed_at_join",
            "Event batches the replica published before the gateway joined its stream",
            labels=["replica"],
        )
        for i, r in enumerate(reps):
            lbl = [r.url]
            up.add_metric(lbl, 1.0 if r.healthy else 0.0)
            fl.add_metric(lbl, inflight[i] if i < len(inflight) else 0)
            pend.add_metric(lbl, r.state.pending_prefill_tokens)
            rate.add_metric(lbl, r.state.prefill_tokens_per_s)
            size.add_metric(lbl, self._index.cached_blocks(i))
            if r.events is not None:
                st = r.events.stats
                lag.add_metric(lbl, st.last_lag_s)
                age.add_metric(lbl, now - st.last_batch_at if st.last_batch_at else -1.0)
                ev.add_metric(lbl, st.events)
                gaps.add_metric(lbl, st.gaps)
                stale.add_metric(lbl, st.stale_marks)
                late.add_metric(lbl, st.late_joins)
                missed.add_metric(lbl, st.missed_at_join)
        yield from (up, fl, pend, rate, size, lag, age, ev, gaps, stale, late, missed)
        hs = self._hasher()
        tok = CounterMetricFamily(
            PREFIX + "prompt_tokens_hashed", "Prompt tokens hashed, by how", labels=["how"]
        )
        tok.add_metric(["reused"], hs.tokens_reused)
        tok.add_metric(["tokenised"], hs.tokens_total - hs.tokens_reused)
        yield tok
        mism = CounterMetricFamily(
            PREFIX + "hash_mismatches", "Incremental tokenisations that differed from full ones"
        )
        mism.add_metric([], hs.mismatches)
        yield mism


class GatewayMetrics:
    """The gateway's metrics; :attr:`registry` is served at ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            PREFIX + "requests",
            "Requests proxied, by replica, endpoint and outcome",
            ["replica", "endpoint", "outcome"],
            registry=r,
        )
        self.decisions = Counter(
            PREFIX + "routing_decisions", "Routing decisions by reason", ["reason"], registry=r
        )
        self.retries = Counter(
            PREFIX + "retries", "Requests re-sent to another replica", ["reason"], registry=r
        )
        self.errors = Counter(
            PREFIX + "errors", "Requests the gateway answered with an error", ["kind"], registry=r
        )
        self.images = Counter(
            PREFIX + "images_forwarded",
            "Named images forwarded, whole or by name alone (held by the replica's engine)",
            ["form"],
            registry=r,
        )
        self.image_refusals = Counter(
            PREFIX + "image_name_refusals",
            "Requests whose images sent by name the engine refused (then sent whole)",
            registry=r,
        )
        ratio_buckets = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)
        self.matched_ratio = Histogram(
            PREFIX + "matched_prefix_ratio",
            "Share of the prompt's tokens cached on the chosen replica, per the prefix index",
            buckets=ratio_buckets,
            registry=r,
        )
        self.cached_ratio = Histogram(
            PREFIX + "cached_tokens_ratio",
            "Share of the prompt's tokens the engine reported cached (usage), when it reports it",
            buckets=ratio_buckets,
            registry=r,
        )
        self.route_seconds = Histogram(
            PREFIX + "route_seconds",
            "Time from request received to dispatch (parse, hash, route), seconds",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5),
            registry=r,
        )
        self.first_byte_seconds = Histogram(
            PREFIX + "upstream_first_byte_seconds",
            "Time from dispatch to the replica's first byte of a streamed answer (its time to "
            "first token as the gateway sees it), seconds",
            ["replica"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=r,
        )

        self._request_children: dict[tuple[str, str, str], Any] = {}
        self._decision_children: dict[str, Any] = {}

    def count_request(self, replica: str, endpoint: str, outcome: str) -> None:
        """``requests`` + 1 for these labels (children bound once: the per-request path)."""
        key = (replica, endpoint, outcome)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.requests.labels(*key)
        child.inc()

    def count_decision(self, reason: str) -> None:
        """``routing_decisions`` + 1 for ``reason``."""
        child = self._decision_children.get(reason)
        if child is None:
            child = self._decision_children[reason] = self.decisions.labels(reason)
        child.inc()

    def watch(
        self,
        replicas: Callable[[], Sequence[ReplicaView]],
        inflight: Callable[[], Sequence[int]],
        index: PrefixIndex,
        hasher: Callable[[], HasherStats],
    ) -> None:
        self.registry.register(_StateCollector(replicas, inflight, index, hasher))
