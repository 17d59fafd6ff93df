"""agent_aware on hand-worked states: block size 16, default rate 10,000 prompt tokens/s."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvharness.routing.base import ReplicaState, RouteRequest
from kvharness.routing.policies.agent_aware import AgentAware

Cluster = Callable[..., list[ReplicaState]]
Req = Callable[..., RouteRequest]


def test_ttft_estimate(cluster: Cluster, req: Req) -> None:
    p = AgentAware(decode_cost_tokens=100)
    r = cluster(1, capacity_blocks=100)[0]
    r.pending_prefill_tokens, r.running, r.used_blocks = 5000, 10, 90
    q = req(list(range(40)))  # 640 tokens, 40 blocks
    # 8 blocks cached -> 512 new tokens = 32 blocks; 90 + 32 - 100 = 22 blocks short.
    work = 5000 + 512 + 100 * 10 + 22 * 16
    assert p.ttft(q, r, matched=8) == pytest.approx(work / 10_000)
    r.prefill_tokens_per_s = 2000.0
    assert p.ttft(q, r, matched=8) == pytest.approx(work / 2000)


def test_without_session_it_picks_least_time(cluster: Cluster, req: Req) -> None:
    p = AgentAware()
    reps = cluster(3)
    reps[0].pending_prefill_tokens = 3000  # cached fully but queued: 0.3 s
    q = req(list(range(100)))  # 1600 tokens: 0.16 s cold on an idle replica
    assert p.choose(q, reps, [100, 0, 60], 0.0) == (2, "least_time")  # 640 new: 0.064 s


def test_session_stays_home_until_queueing_exceeds_reprefill(cluster: Cluster, req: Req) -> None:
    p = AgentAware()
    reps = cluster(2)
    t0 = req(list(range(60)), session="s", rid="t0")  # 960 tokens
    assert p.choose(t0, reps, [0, 0], 0.0) == (0, "place")
    p.on_routed(t0, 0, 0.0)
    p.on_finished(t0, 0, 1.0)
    t1 = req(list(range(62)), session="s", rid="t1")  # 992 tokens, 60 blocks cached at home
    # Home has 5,000 tokens queued: 0.503 s; elsewhere 0.099 s. 0.503 < 0.099 + 0.5 -> stay.
    reps[0].pending_prefill_tokens = 5000
    assert p.choose(t1, reps, [60, 0], 2.0) == (0, "affinity")
    # 20,000 queued: 2.003 s > 0.599 and > 2 x 0.099 -> move, and the session is re-homed.
    reps[0].pending_prefill_tokens = 20_000
    assert p.choose(t1, reps, [60, 0], 2.0) == (1, "spill")
    p.on_routed(t1, 1, 2.0)
    assert p.home_of("s") == 1
    assert (p.homed_sessions(0), p.homed_sessions(1)) == (0, 1)


def test_new_sessions_follow_shared_prefix_within_the_load_bound(
    cluster: Cluster, req: Req
) -> None:
    p = AgentAware()
    reps = cluster(4)
    repo = list(range(1000, 1064))  # a 64-block shared repository prefix, cached on r2
    placed = []
    for k in range(4):
        q = req([*repo, k], session=f"s{k}", rid=f"q{k}")
        d = p.choose(q, reps, [0, 0, 64, 0], float(k))
        p.on_routed(q, d.replica, float(k))
        placed.append(d.replica)
    # s0 goes to the cached copy; s1 would too, but r2 already holds ceil(1.25 x 2 / 4) = 1
    # session, so the bound sends it elsewhere; the bound grows as sessions arrive.
    assert placed[0] == 2
    assert placed[1] != 2
    assert max(p.homed_sessions(i) for i in range(4)) <= 2
    assert sum(p.homed_sessions(i) for i in range(4)) == 4


def test_placement_avoids_replicas_whose_homed_contexts_fill_the_cache(
    cluster: Cluster, req: Req
) -> None:
    p = AgentAware(load_factor=10.0)
    reps = cluster(2, capacity_blocks=100)
    big = req(list(range(85)), session="big", rid="b")
    p.choose(big, reps, [0, 0], 0.0)
    p.on_routed(big, 0, 0.0)  # 85 + 4 blocks of context (64 output tokens) homed on r0
    q = req([7, 8], session="new", rid="n")
    # r0 is otherwise faster (r1 has a queue), but 89 + 6 > 0.9 x 100.
    reps[1].pending_prefill_tokens = 1000
    assert p.choose(q, reps, [0, 0], 1.0) == (1, "place")


def test_homes_expire_after_the_idle_time(cluster: Cluster, req: Req) -> None:
    p = AgentAware(session_idle_s=10.0)
    reps = cluster(2)
    q = req([1, 2], session="s")
    p.on_routed(q, 1, 0.0)
    p.on_finished(q, 1, 1.0)
    p.choose(req([9]), reps, [0, 0], 10.5)
    assert p.home_of("s") == 1  # quiet for 9.5 s only
    p.choose(req([9]), reps, [0, 0], 11.0)
    assert p.home_of("s") is None
    assert p.homed_sessions(1) == 0


def test_in_flight_sessions_never_expire(cluster: Cluster, req: Req) -> None:
    p = AgentAware(session_idle_s=10.0)
    reps = cluster(2)
    a = req([1], session="s", rid="a")
    b = req([1, 2], session="s", rid="b")
    p.on_routed(a, 0, 0.0)
    p.on_finished(a, 0, 1.0)
    p.on_routed(b, 0, 5.0)  # a long turn, still running at t = 100
    p.choose(req([9]), reps, [0, 0], 100.0)
    assert p.home_of("s") == 0


def test_unhealthy_home_re_places(cluster: Cluster, req: Req) -> None:
    p = AgentAware()
    reps = cluster(2)
    q = req([1, 2], session="s")
    p.on_routed(q, 0, 0.0)
    reps[0].healthy = False
    assert p.choose(q, reps, [2, 0], 1.0) == (1, "place")
