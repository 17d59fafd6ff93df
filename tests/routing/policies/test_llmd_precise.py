"""llmd_precise: 2 x prefix + 1 x (1 - kv usage) + 1 x queue score, max wins."""

from __future__ import annotations

from collections.abc import Callable

from kvharness.routing.base import ReplicaState, RouteRequest
from kvharness.routing.policies.llmd_precise import LlmdPrecise
from kvharness.routing.registry import make_policy

Cluster = Callable[..., list[ReplicaState]]
Req = Callable[..., RouteRequest]


def test_worked_scores(cluster: Cluster, req: Req) -> None:
    p = LlmdPrecise()
    reps = cluster(3, capacity_blocks=100)
    reps[0].used_blocks, reps[0].waiting = 50, 4  # prefix 2/4: 2*0.5 + 0.5 + 0   = 1.5
    reps[1].used_blocks, reps[1].waiting = 0, 0  # prefix 0:   0     + 1   + 1   = 2.0
    reps[2].used_blocks, reps[2].waiting = 90, 2  # prefix 4/4: 2*1  + 0.1 + 0.5 = 2.6
    s = p.scores(req([1, 2, 3, 4]), reps, [2, 0, 4], [0, 1, 2])
    assert s[0] == 1.5 and s[1] == 2.0 and abs(s[2] - 2.6) < 1e-9
    assert p.choose(req([1, 2, 3, 4]), reps, range(len(reps)), [2, 0, 4], 0.0) == (2, "max_score")
    # A longer queue on r2 (6, now the longest): r0 = 1 + 0.5 + 2/6, r1 = 2.0, r2 = 2 + 0.1 + 0.
    reps[2].waiting = 6
    assert p.choose(req([1, 2, 3, 4]), reps, range(len(reps)), [2, 0, 4], 0.0).replica == 2
    # A full cache on r2 as well: r2 = 2.0 ties with r1 -> either, at random.
    reps[2].used_blocks = 100
    picks = {
        p.choose(req([1, 2, 3, 4]), reps, range(len(reps)), [2, 0, 4], 0.0).replica
        for _ in range(40)
    }
    assert picks == {1, 2}


def test_equal_queues_score_one_each_and_ties_break_at_random(cluster: Cluster, req: Req) -> None:
    p = make_policy("llmd_precise", seed=1)
    reps = cluster(4)
    picks = {
        p.choose(req([1]), reps, range(len(reps)), [0, 0, 0, 0], 0.0).replica for _ in range(50)
    }
    assert picks == {0, 1, 2, 3}


def test_prefix_ratio_is_clipped_and_empty_prompt_scores_zero(cluster: Cluster, req: Req) -> None:
    p = LlmdPrecise()
    reps = cluster(2)
    assert p.scores(req([1, 2]), reps, [5, 0], [0, 1])[0] == 2.0 + 1.0 + 1.0
    assert p.scores(req([]), reps, [0, 0], [0, 1]) == {0: 2.0, 1: 2.0}
