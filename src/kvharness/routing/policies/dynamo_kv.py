"""``dynamo_kv``: NVIDIA Dynamo's KV router cost function, reproduced.

Studied: ai-dynamo/dynamo ``lib/llm/src/kv_router/scheduler.rs`` (commit db19bd2a,
``DefaultWorkerSelector::select_worker`` and ``softmax_sample``) and the active-sequence tracker
(``lib/kv-router`` ``sequence.rs``: ``potential_blocks_and_tokens``, ``new_blocks``,
``new_tokens``); defaults from ``docs/router`` (``--kv-overlap-score-weight`` 1.0,
``--router-temperature`` 0.0).

Per worker, with ``overlap`` its cached leading blocks of the request (from the KV-event index)::

    prefill_blocks = (isl - overlap * block_size + active_prefill_tokens) / block_size
    decode_blocks  = active_blocks + blocks of the request not already among active_blocks
    logit          = overlap_score_weight * prefill_blocks + decode_blocks

and the worker with the lowest logit wins (temperature 0; ties broken by the smaller cached tree,
then at random); at temperature > 0 a worker is sampled with probability proportional to
``exp(-(logit / (max - min)) / temperature)``.

``active_blocks`` is the router's own book of the requests it has in flight on the worker: the
distinct blocks of their prompts, added when routed, dropped when finished, as upstream does.
``active_prefill_tokens`` (prompt tokens admitted and not yet prefilled) is read from
:attr:`ReplicaState.pending_prefill_tokens`; upstream keeps it in the same book and clears a
request's share at its first token, which is what the engine's counter reports.
Not reproduced: the optional router queue (``router_queue_threshold``) and replica sync.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest

__all__ = ["DynamoKV"]


class DynamoKV(Policy):
    """Dynamo KV router (see module docstring)."""

    name = "dynamo_kv"

    def __init__(
        self, overlap_score_weight: float = 1.0, temperature: float = 0.0, seed: int = 0
    ) -> None:
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.overlap_score_weight = overlap_score_weight
        self.temperature = temperature
        self._rng = random.Random(seed)
        # per replica: block hash -> number of in-flight requests holding it
        self._active: dict[int, dict[int, int]] = {}
        # block hash -> replicas where some in-flight request holds it (to count shared blocks
        # in one pass over the request instead of one per replica)
        self._active_where: dict[int, set[int]] = {}
        self._requests: dict[str, tuple[int, tuple[int, ...]]] = {}

    def active_blocks(self, replica: int) -> int:
        return len(self._active.get(replica, {}))

    def logits(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        matched_blocks: Sequence[int],
        among: Sequence[int],
    ) -> dict[int, float]:
        isl = request.prompt_tokens
        distinct = set(request.block_hashes)
        shared = dict.fromkeys(among, 0)
        where = self._active_where
        for h in distinct:
            for r in where.get(h, ()):
                if r in shared:
                    shared[r] += 1
        out: dict[int, float] = {}
        for i in among:
            bs = replicas[i].block_size
            new_tokens = max(0, isl - matched_blocks[i] * bs)
            prefill_blocks = (new_tokens + replicas[i].pending_prefill_tokens) / bs
            new_blocks = len(distinct) - shared[i]
            decode_blocks = self.active_blocks(i) + new_blocks
            out[i] = self.overlap_score_weight * prefill_blocks + decode_blocks
        return out

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        logits = self.logits(request, replicas, matched_blocks, eligible)
        if self.temperature == 0.0:
            best = min(logits.values())
            tied = [i for i in eligible if logits[i] == best]
            if len(tied) > 1:
                # Upstream: the smaller radix tree (blocks cached on the worker), then at random.
                least = min(replicas[i].cached_blocks for i in tied)
                tied = [i for i in tied if replicas[i].cached_blocks == least]
            return Decision(self._rng.choice(tied), "cost")
        lo, hi = min(logits.values()), max(logits.values())
        if hi == lo:
            return Decision(self._rng.choice(eligible), "cost")
        scaled = [-(logits[i] / (hi - lo)) / self.temperature for i in eligible]
        top = max(scaled)
        weights = [math.exp(v - top) for v in scaled]
        return Decision(self._rng.choices(eligible, weights)[0], "cost_sampled")

    def on_routed(self, request: RouteRequest, replica: int, now: float) -> None:
        blocks = tuple(set(request.block_hashes))
        active = self._active.setdefault(replica, {})
        for h in blocks:
            n = active.get(h, 0)
            if not n:
                self._active_where.setdefault(h, set()).add(replica)
            active[h] = n + 1
        self._requests[request.request_id] = (replica, blocks)

    def on_finished(self, request: RouteRequest, replica: int, now: float) -> None:
        entry = self._requests.pop(request.request_id, None)
        if entry is None:
            return
        where, blocks = entry
        active = self._active[where]
        for h in blocks:
            left = active[h] - 1
            if left:
                active[h] = left
            else:
                del active[h]
                holders = self._active_where[h]
                holders.discard(where)
                if not holders:
                    del self._active_where[h]
