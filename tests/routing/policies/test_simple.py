"""round_robin, least_outstanding and session on hand-built cluster states."""

from __future__ import annotations

from collections.abc import Callable

from kvharness.routing.base import ReplicaState, RouteRequest
from kvharness.routing.registry import make_policy


def test_round_robin_cycles_and_skips_replicas_not_eligible(
    cluster: Callable[..., list[ReplicaState]], req: Callable[..., RouteRequest]
) -> None:
    p = make_policy("round_robin")
    reps = cluster(3)
    picks = [p.choose(req([1]), reps, [0, 2], [0, 0, 0], 0.0).replica for _ in range(4)]
    assert picks == [0, 2, 0, 2]
    picks = [p.choose(req([1]), reps, range(3), [0, 0, 0], 0.0).replica for _ in range(3)]
    assert picks == [0, 1, 2]  # 2 was last: the turn wraps to 0, and 1 is back in it


def test_least_outstanding_takes_fewest_and_rotates_ties(
    cluster: Callable[..., list[ReplicaState]], req: Callable[..., RouteRequest]
) -> None:
    p = make_policy("least_outstanding")
    reps = cluster(3)
    reps[0].running, reps[1].waiting, reps[2].running = 3, 1, 1
    reps[2].waiting = 1  # outstanding: 3, 1, 2
    assert p.choose(req([1]), reps, range(len(reps)), [0, 0, 0], 0.0) == (1, "least_load")
    reps[1].waiting = 2  # now 3, 2, 2: a tie between 1 and 2; the last pick was 1, so 2 goes first
    assert p.choose(req([1]), reps, range(len(reps)), [5, 5, 5], 0.0).replica == 2
    assert p.choose(req([1]), reps, range(len(reps)), [5, 5, 5], 0.0).replica == 1


def test_least_outstanding_ignores_idle_replica_not_eligible(
    cluster: Callable[..., list[ReplicaState]], req: Callable[..., RouteRequest]
) -> None:
    p = make_policy("least_outstanding")
    reps = cluster(2)
    reps[1].running = 10
    assert p.choose(req([1]), reps, [1], [0, 0], 0.0).replica == 1


def test_session_is_sticky_and_spreads_sessions(
    cluster: Callable[..., list[ReplicaState]], req: Callable[..., RouteRequest]
) -> None:
    p = make_policy("session")
    reps = cluster(8)
    first = {
        s: p.choose(req([s], session=f"s{s}"), reps, range(len(reps)), [0] * 8, 0.0).replica
        for s in range(200)
    }
    again = {
        s: p.choose(req([s, 9], session=f"s{s}"), reps, range(len(reps)), [0] * 8, 1.0).replica
        for s in range(200)
    }
    assert first == again  # the same session lands on the same replica, whatever its prompt
    counts = [list(first.values()).count(i) for i in range(8)]
    assert min(counts) >= 10  # 160 virtual nodes each: no replica is starved (mean 25)


def test_session_failover_moves_only_the_failed_replicas_sessions(
    cluster: Callable[..., list[ReplicaState]], req: Callable[..., RouteRequest]
) -> None:
    p = make_policy("session")
    reps = cluster(4)
    before = {
        s: p.choose(req([1], session=f"s{s}"), reps, range(len(reps)), [0] * 4, 0.0).replica
        for s in range(100)
    }
    after = {
        s: p.choose(req([1], session=f"s{s}"), reps, [0, 1, 3], [0] * 4, 0.0) for s in range(100)
    }
    for s in range(100):
        if before[s] == 2:
            assert after[s].replica != 2 and after[s].reason == "failover"
        else:
            assert after[s] == (before[s], "affinity")


def test_session_without_id_hashes_the_prompt_prefix(
    cluster: Callable[..., list[ReplicaState]], req: Callable[..., RouteRequest]
) -> None:
    p = make_policy("session", prefix_blocks=2)
    reps = cluster(16)
    a = p.choose(req([7, 8, 100], rid="a"), reps, range(len(reps)), [0] * 16, 0.0).replica
    b = p.choose(req([7, 8, 200, 300], rid="b"), reps, range(len(reps)), [0] * 16, 0.0).replica
    assert a == b  # same first two blocks -> same replica
    spread = {
        p.choose(req([7, k]), reps, range(len(reps)), [0] * 16, 0.0).replica for k in range(64)
    }
    assert len(spread) > 4  # different second blocks spread out
