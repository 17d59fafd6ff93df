"""sglang_cache_aware on hand-worked states (block size 16 unless said)."""

from __future__ import annotations

from collections.abc import Callable

from kvharness.routing.base import ReplicaState, RouteRequest
from kvharness.routing.policies.sglang_cache_aware import ApproxTree
from kvharness.routing.registry import make_policy

Cluster = Callable[..., list[ReplicaState]]
Req = Callable[..., RouteRequest]


def test_prefix_above_threshold_goes_to_its_holder_else_to_the_smallest_tree(
    cluster: Cluster, req: Req
) -> None:
    p = make_policy("sglang_cache_aware")
    reps = cluster(3)
    zero = [0, 0, 0]
    # Empty trees: every worker has size 0 -> the first of them.
    a = req([1, 2, 3, 4], rid="a")
    assert p.choose(a, reps, range(len(reps)), zero, 0.0) == (0, "smallest_tree")
    p.on_routed(a, 0, 0.0)
    # 3 of 4 blocks match on worker 0: 0.75 > 0.5.
    assert p.choose(req([1, 2, 3, 9]), reps, range(len(reps)), zero, 1.0) == (0, "prefix")
    # 1 of 4 blocks: 0.25 <= 0.5 -> smallest tree, worker 1 (size 0; worker 0 holds 4 blocks).
    b = req([1, 5, 6, 7], rid="b")
    assert p.choose(b, reps, range(len(reps)), zero, 2.0) == (1, "smallest_tree")
    p.on_routed(b, 1, 2.0)
    # Exactly half is not above the threshold.
    assert p.choose(req([1, 2, 8, 9]), reps, range(len(reps)), zero, 3.0) == (2, "smallest_tree")


def test_imbalance_needs_both_thresholds(cluster: Cluster, req: Req) -> None:
    p = make_policy("sglang_cache_aware")
    reps = cluster(3)
    warm = req([1, 2], rid="w")
    p.on_routed(warm, 0, 0.0)
    for k in range(30):
        p.on_routed(req([50 + k], rid=f"x{k}"), 0, 0.0)  # worker 0: 31 in flight
    # max - min = 31, not > 32: cache-aware still, and the prefix is on worker 0.
    assert p.choose(req([1, 2]), reps, range(len(reps)), [0, 0, 0], 1.0) == (0, "prefix")
    p.on_routed(req([60], rid="y"), 0, 1.0)
    p.on_routed(req([61], rid="z"), 0, 1.0)  # 33 in flight vs 0
    assert p.choose(req([1, 2]), reps, range(len(reps)), [0, 0, 0], 1.0) == (1, "balance")
    # Finishing requests brings it back under the threshold.
    p.on_finished(req([61], rid="z"), 0, 2.0)
    p.on_finished(req([60], rid="y"), 0, 2.0)
    assert p.choose(req([1, 2]), reps, range(len(reps)), [0, 0, 0], 2.0) == (0, "prefix")


def test_choice_not_eligible_falls_back_to_first_eligible(cluster: Cluster, req: Req) -> None:
    p = make_policy("sglang_cache_aware")
    reps = cluster(3)
    p.on_routed(req([1, 2]), 1, 0.0)
    assert p.choose(req([1, 2]), reps, [0, 2], [0, 0, 0], 1.0) == (0, "fallback")
    assert p.choose(req([1, 2]), reps, [2], [0, 0, 0], 1.0) == (2, "fallback")


def test_tree_eviction_removes_least_recent_leaves_per_tenant() -> None:
    t = ApproxTree()
    t.insert([1, 2, 3], 0, now=0.0)
    t.insert([1, 5], 0, now=10.0)
    t.insert([1, 2, 3], 1, now=0.0)
    assert (t.size(0), t.size(1)) == (4, 3)
    t.evict_to(3)  # tenant 0: leaves 3 (t=0) and 5 (t=10): 3 goes; tenant 1 already fits
    assert (t.size(0), t.size(1)) == (3, 3)
    assert t.prefix_match([1, 2, 3]) == (3, 1)  # only tenant 1 still holds block 3
    t.evict_to(1)  # tenant 0: 2 (t=0) then 5 (t=10); tenant 1: 3 then 2
    assert (t.size(0), t.size(1)) == (1, 1)
    assert t.prefix_match([1, 5]) == (1, 0)  # node 1: tenant 0 touched at t=10, tenant 1 at 0


def test_eviction_runs_on_the_interval_with_size_in_blocks(cluster: Cluster, req: Req) -> None:
    # 512 chars / (4 chars per token x 16 tokens per block) = 8 blocks per worker.
    p = make_policy("sglang_cache_aware", max_tree_size=512, eviction_interval=60.0)
    reps = cluster(2)
    p.choose(req([0]), reps, range(len(reps)), [0, 0], 0.0)  # starts the eviction clock
    long = req(list(range(100, 120)), rid="long")
    p.on_routed(long, 0, 0.0)
    assert p.tree.size(0) == 20
    p.choose(req([0]), reps, range(len(reps)), [0, 0], 59.0)
    assert p.tree.size(0) == 20
    p.choose(req([0]), reps, range(len(reps)), [0, 0], 60.0)
    assert p.tree.size(0) == 8
    assert p.tree.prefix_match(list(range(100, 120)))[0] == 8
