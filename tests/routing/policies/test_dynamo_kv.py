"""dynamo_kv: logit = overlap_score_weight x prefill blocks + decode blocks (block size 16)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from kvharness.routing.base import ReplicaState, RouteRequest
from kvharness.routing.policies.dynamo_kv import DynamoKV
from kvharness.routing.registry import make_policy

Cluster = Callable[..., list[ReplicaState]]
Req = Callable[..., RouteRequest]


def test_worked_logits(cluster: Cluster, req: Req) -> None:
    p = DynamoKV()
    reps = cluster(3)
    r = req([1, 2, 3, 4])  # 64 tokens, 4 blocks
    # r0: all 4 blocks cached -> prefill 0 + decode 4 = 4; r1, r2: prefill 4 + decode 4 = 8.
    assert p.logits(r, reps, [4, 0, 0], [0, 1, 2]) == {0: 4.0, 1: 8.0, 2: 8.0}
    assert p.choose(r, reps, range(len(reps)), [4, 0, 0], 0.0) == (0, "cost")
    # r0 now has 160 prompt tokens waiting for prefill: (0 + 160) / 16 + 4 = 14 > 8.
    reps[0].pending_prefill_tokens = 160
    assert p.logits(r, reps, [4, 0, 0], [0, 1, 2])[0] == 14.0
    assert p.choose(r, reps, range(len(reps)), [4, 0, 0], 0.0).replica in (1, 2)


def test_decode_blocks_come_from_the_routers_own_book(cluster: Cluster, req: Req) -> None:
    p = DynamoKV()
    reps = cluster(2)
    busy = req(list(range(100, 110)), rid="busy")  # 10 distinct blocks in flight on r1
    p.on_routed(busy, 1, 0.0)
    r = req([1, 2, 3, 4])
    assert p.logits(r, reps, [0, 0], [0, 1]) == {0: 8.0, 1: 18.0}
    # Blocks the request shares with in-flight requests are not new there.
    shared = req([100, 101, 5, 6])
    assert p.logits(shared, reps, [2, 2], [0, 1]) == {0: 2.0 + 4.0, 1: 2.0 + 10.0 + 2.0}
    p.on_finished(busy, 1, 1.0)
    assert p.active_blocks(1) == 0
    assert p.logits(r, reps, [0, 0], [0, 1]) == {0: 8.0, 1: 8.0}


def test_overlap_weight_zero_is_pure_load_balance(cluster: Cluster, req: Req) -> None:
    p = DynamoKV(overlap_score_weight=0.0)
    reps = cluster(2)
    p.on_routed(req([7], rid="x"), 0, 0.0)
    assert p.choose(req([1, 2]), reps, range(len(reps)), [2, 0], 0.0).replica == 1


def test_ties_go_to_the_smaller_cache(cluster: Cluster, req: Req) -> None:
    p = DynamoKV()
    reps = cluster(3)
    reps[0].cached_blocks, reps[1].cached_blocks, reps[2].cached_blocks = 50, 10, 30
    assert p.choose(req([1, 2]), reps, range(len(reps)), [0, 0, 0], 0.0).replica == 1


def test_temperature_samples_softmax_of_normalised_logits(cluster: Cluster, req: Req) -> None:
    p = make_policy("dynamo_kv", temperature=1.0, seed=3)
    reps = cluster(2)
    reps[1].pending_prefill_tokens = 160  # logits 8 and 18: range 10 -> p ~ e^-0.8, e^-1.8
    picks = Counter(
        p.choose(req([1, 2, 3, 4]), reps, range(len(reps)), [0, 0], 0.0).replica
        for _ in range(4000)
    )
    expected = 1 / (1 + 2.718281828**-1.0)
    assert picks[0] / 4000 == pytest.approx(expected, abs=0.03)


def test_rejects_negative_temperature() -> None:
    with pytest.raises(ValueError, match="temperature"):
        DynamoKV(temperature=-1.0)
