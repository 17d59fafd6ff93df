"""``llmd_precise``: llm-d inference scheduler with the precise prefix-cache profile, reproduced.

Studied: llm-d/llm-d-inference-scheduler at commit 520af478:
``deploy/config/epp-precise-prefix-cache-config.yaml`` (the profile and its weights),
``pkg/epp/framework/plugins/scheduling/scorer/preciseprefixcache/precise_prefix_cache.go`` and
``utils.go`` (``absoluteScoredPods``), ``scorer/kvcacheutilization/kvcache_utilization.go``,
``scorer/queuedepth/queue.go`` and ``picker/maxscore/picker.go``.

Each scorer gives every endpoint a score in [0, 1]; the profile sums them with weights and the
max-score picker takes the highest (ties broken at random: upstream shuffles before a stable sort):

* precise prefix cache (weight 2): leading blocks of the request cached on the endpoint, from the
  index fed by the engines' KV events, over the request's total blocks, clipped to 1;
* KV-cache utilisation (weight 1): ``1 - kv_usage``;
* queue (weight 1): ``(max_waiting - waiting) / (max_waiting - min_waiting)`` over the
  endpoints, 1 for all when every queue is equally long.

Not reproduced: the speculative index entries (off by default upstream) and the decode filter
(relevant to prefill/decode disaggregation only).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest

__all__ = ["LlmdPrecise"]


class LlmdPrecise(Policy):
    """llm-d precise-prefix-cache profile (see module docstring)."""

    name = "llmd_precise"

    def __init__(
        self,
        prefix_weight: float = 2.0,
        kv_utilization_weight: float = 1.0,
        queue_weight: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.prefix_weight = prefix_weight
        self.kv_utilization_weight = kv_utilization_weight
        self.queue_weight = queue_weight
        self._rng = random.Random(seed)

    def scores(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        matched_blocks: Sequence[int],
        among: Sequence[int],
    ) -> dict[int, float]:
        total = len(request.block_hashes)
        waiting = [replicas[i].waiting for i in among]
        qmin, qmax = min(waiting), max(waiting)
        out: dict[int, float] = {}
        for i in among:
            r = replicas[i]
            prefix = min(1.0, matched_blocks[i] / total) if total > 0 else 0.0
            kv = 1.0 - r.kv_usage
            queue = 1.0 if qmax == qmin else (qmax - r.waiting) / (qmax - qmin)
            out[i] = (
                self.prefix_weight * prefix
                + self.kv_utilization_weight * kv
                + self.queue_weight * queue
            )
        return out

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        scores = self.scores(request, replicas, matched_blocks, eligible)
        best = max(scores.values())
        tied = [i for i in eligible if scores[i] == best]
        return Decision(self._rng.choice(tied), "max_score")
