"""``sglang_cache_aware``: SGLang router's cache-aware policy, reproduced.

Studied: sgl-project/sglang ``sgl-router/src/policies/cache_aware.rs`` (commit 026f853b),
``sgl-router/src/policies/tree.rs`` (commit 4d40eec0), defaults from
``sgl-router/py_src/sglang_router/launch_router.py`` (commit 094b723a) — the values a user gets
from ``python -m sglang_router.launch_router``.

The rule, per request:

1. Load = requests the router has in flight on a worker (incremented when routed, decremented when
   finished). The system is *imbalanced* when ``max - min > balance_abs_threshold`` **and**
   ``max > min * balance_rel_threshold``; then the request goes to the least loaded worker.
2. Otherwise, find the longest prefix of the request in an approximate radix tree built from the
   router's own past decisions. If ``matched / total > cache_threshold``, route to a worker holding
   the deepest matched node; else to the worker whose tree is smallest (most room, presumably).
3. Either way the request is inserted into the tree under the chosen worker. Every
   ``eviction_interval`` seconds, each worker's part of the tree is cut back to ``max_tree_size``
   by evicting its least recently used leaves.

Differences, stated: SGLang's tree is over request *characters*; here it is over the prompt's block
hashes (which name whole prefixes, so the tree is a trie of hashes), and match rate is matched /
total full blocks. ``max_tree_size`` is in characters upstream; it is converted at
``chars_per_token`` (4) and the engines' block size into blocks. Upstream picks an arbitrary tenant
(``DashMap`` iteration order) of the deepest matched node; here the most recently used one.
Upstream runs eviction on a background thread; here it runs at the first request after each
interval (``now`` is given, no clock is read).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest

__all__ = ["ApproxTree", "SglangCacheAware"]


class ApproxTree:
    """A multi-tenant trie over chained block hashes with per-tenant LRU leaf eviction.

    A block hash names its whole prefix, so node = hash and parent = previous hash of the chain.
    Invariant (as upstream): a tenant holding a node holds all its ancestors, so each tenant's
    nodes form a rooted subtree and its leaves can be evicted one by one.
    """

    __slots__ = ("_child_count", "_parent", "_size", "_tenants")

    def __init__(self) -> None:
        self._tenants: dict[int, dict[int, float]] = {}  # node -> tenant -> last access
        self._parent: dict[int, int | None] = {}
        self._child_count: dict[tuple[int, int], int] = {}  # (tenant, node) -> children held
        self._size: dict[int, int] = {}  # tenant -> nodes held

    def size(self, tenant: int) -> int:
        return self._size.get(tenant, 0)

    def insert(self, hashes: Sequence[int], tenant: int, now: float) -> None:
        """Record that ``tenant`` holds the prefix ``hashes``; touches every node on the path."""
        self._size.setdefault(tenant, 0)
        parent: int | None = None
        for h in hashes:
            holders = self._tenants.get(h)
            if holders is None:
                holders = self._tenants[h] = {}
                self._parent[h] = parent
            if tenant not in holders:
                self._size[tenant] += 1
                if parent is not None:
                    key = (tenant, parent)
                    self._child_count[key] = self._child_count.get(key, 0) + 1
            holders[tenant] = now
            parent = h

    def prefix_match(self, hashes: Sequence[int]) -> tuple[int, int | None]:
        """(matched blocks, most recently used tenant of the deepest matched node or None)."""
        depth = 0
        node: int | None = None
        for h in hashes:
            if h not in self._tenants:
                break
            depth += 1
            node = h
        if node is None:
            return 0, None
        holders = self._tenants[node]
        return depth, max(holders, key=lambda t: (holders[t], -t))

    def smallest_tenant(self, among: Iterable[int]) -> int:
        return min(among, key=lambda t: (self._size.get(t, 0), t))

    def evict_to(self, max_size: int) -> None:
        """Per tenant over ``max_size`` nodes, evict its least recently used leaves until it fits."""
        over = {t for t, n in self._size.items() if n > max_size}
        if not over:
            return
        heap: list[tuple[float, int, int]] = []
        for node, holders in self._tenants.items():
            for t, ts in holders.items():
                if t in over and not self._child_count.get((t, node)):
                    heap.append((ts, t, node))
        heapq.heapify(heap)
        while heap:
            _, t, node = heapq.heappop(heap)
            if self._size[t] <= max_size:
                continue
            holders = self._tenants[node]
            del holders[t]
            self._size[t] -= 1
            self._child_count.pop((t, node), None)
            parent = self._parent[node]
            if not holders:
                del self._tenants[node]
                del self._parent[node]
            if parent is not None:
                key = (t, parent)
                left = self._child_count[key] - 1
                if left:
                    self._child_count[key] = left
                else:
                    del self._child_count[key]
                    heapq.heappush(heap, (self._tenants[parent][t], t, parent))


class SglangCacheAware(Policy):
    """SGLang router ``cache_aware`` (see module docstring for the rule and the differences)."""

    name = "sglang_cache_aware"

    def __init__(
        self,
        cache_threshold: float = 0.5,
        balance_abs_threshold: int = 32,
        balance_rel_threshold: float = 1.0001,
        eviction_interval: float = 60.0,
        max_tree_size: int = 2**24,
        chars_per_token: float = 4.0,
    ) -> None:
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.eviction_interval = eviction_interval
        self.max_tree_size = max_tree_size
        self.chars_per_token = chars_per_token
        self.tree = ApproxTree()
        self._load: dict[int, int] = {}
        self._last_eviction: float | None = None

    def load(self, replica: int) -> int:
        return self._load.get(replica, 0)

    def _max_tree_blocks(self, block_size: int) -> int:
        return max(1, int(self.max_tree_size / (self.chars_per_token * max(1, block_size))))

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        if self._last_eviction is None:
            self._last_eviction = now
        elif self.eviction_interval > 0 and now - self._last_eviction >= self.eviction_interval:
            self.tree.evict_to(self._max_tree_blocks(replicas[0].block_size))
            self._last_eviction = now

        loads = [self.load(i) for i in range(len(replicas))]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.balance_abs_threshold and hi > lo * self.balance_rel_threshold:
            return Decision(min(eligible, key=lambda i: (loads[i], i)), "balance")

        hashes = request.block_hashes
        depth, tenant = self.tree.prefix_match(hashes)
        rate = depth / len(hashes) if hashes else 0.0
        if rate > self.cache_threshold and tenant is not None:
            chosen, reason = tenant, "prefix"
        else:
            # The worker with the smallest tree (all workers start in the tree at size 0).
            chosen, reason = self.tree.smallest_tenant(range(len(replicas))), "smallest_tree"
        if chosen not in eligible:
            chosen, reason = eligible[0], "fallback"
        return Decision(chosen, reason)

    def on_routed(self, request: RouteRequest, replica: int, now: float) -> None:
        self._load[replica] = self.load(replica) + 1
        self.tree.insert(request.block_hashes, replica, now)

    def on_finished(self, request: RouteRequest, replica: int, now: float) -> None:
        self._load[replica] = max(0, self.load(replica) - 1)
