"""agent_aware on hand-worked states: block size 16, default rate 10,000 prompt tokens/s."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from kvharness.routing.base import ReplicaState, RouteRequest
from kvharness.routing.policies.agent_aware import AgentAware

Cluster = Callable[..., list[ReplicaState]]
Req = Callable[..., RouteRequest]


def test_ttft_estimate(cluster: Cluster, req: Req) -> None:
    p = AgentAware(decode_cost_tokens=100, pooled_rate=False)
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
    assert p.choose(q, reps, range(len(reps)), [100, 0, 60], 0.0) == (
        2,
        "least_time",
    )  # 640 new: 0.064 s


def test_session_stays_home_until_queueing_exceeds_reprefill(cluster: Cluster, req: Req) -> None:
    p = AgentAware()
    reps = cluster(2)
    t0 = req(list(range(60)), session="s", rid="t0")  # 960 tokens
    assert p.choose(t0, reps, range(len(reps)), [0, 0], 0.0) == (0, "place")  # a tie: the first
    p.on_routed(t0, 0, 0.0)
    p.on_finished(t0, 0, 1.0)
    t1 = req(list(range(62)), session="s", rid="t1")  # 992 tokens, 60 blocks cached at home
    # Nothing else resident: cost = ttft. Home has 5,000 tokens queued: 0.5032 s; elsewhere the
    # whole prompt, 0.0992 s. 0.5032 < 0.0992 + 0.5 -> stay.
    reps[0].pending_prefill_tokens = 5000
    assert p.choose(t1, reps, range(len(reps)), [60, 0], 2.0) == (0, "affinity")
    # 20,000 queued: 2.0032 s > 0.5992 and > 1.5 x 0.0992 -> move, and the session is re-homed.
    reps[0].pending_prefill_tokens = 20_000
    assert p.choose(t1, reps, range(len(reps)), [60, 0], 2.0) == (1, "spill")
    p.on_routed(t1, 1, 2.0)
    assert p.home_of("s") == 1
    assert (p.homed_sessions(0), p.homed_sessions(1)) == (0, 1)


def test_session_moves_off_a_replica_whose_resident_context_slows_its_decode(
    cluster: Cluster, req: Req
) -> None:
    p = AgentAware()
    reps = cluster(2, capacity_blocks=100_000)
    t0 = req(list(range(100)), session="s", rid="t0", out=20_000)  # a long-decoding session
    p.on_routed(t0, 0, 0.0)
    p.on_finished(t0, 0, 1.0)
    t1 = req(list(range(102)), session="s", rid="t1")
    assert p.choose(t1, reps, range(len(reps)), [100, 0], 2.0) == (0, "affinity")
    # 50,000 blocks of other requests' KV running on r0: each of the session's >= 20,000 decode
    # steps reads them: 1.5e-4 x 20,000 x 800,000 tokens / 10,000 = 240 s, far above the 0.16 s
    # re-prefill on r1.
    reps[0].used_blocks = 50_000
    assert p.choose(t1, reps, range(len(reps)), [100, 0], 2.0) == (1, "rebalance")


def test_new_sessions_follow_shared_prefix_until_contention_outweighs_it(
    cluster: Cluster, req: Req
) -> None:
    p = AgentAware()
    reps = cluster(2, capacity_blocks=100_000)
    repo = list(range(1000, 1064))  # a 64-block shared repository prefix, cached on r1
    a = req([*repo, 1], session="a", rid="a")  # 1,040 tokens: 0.104 s cold, 0.0016 s on r1
    assert p.choose(a, reps, range(len(reps)), [0, 64], 0.0) == (1, "place")
    p.on_routed(a, 1, 0.0)
    # r1 now runs 8,000 blocks of KV; a new session expects 64 decode steps (the mean so far):
    # 1.5e-4 x 64 x 128,000 / 10,000 = 0.123 s > the 0.102 s the cached prefix saves.
    reps[1].used_blocks = 8000
    b = req([*repo, 2], session="b", rid="b")
    assert p.choose(b, reps, range(len(reps)), [0, 64], 1.0) == (0, "place")


def test_placement_avoids_replicas_whose_resident_context_fills_the_cache(
    cluster: Cluster, req: Req
) -> None:
    p = AgentAware()
    reps = cluster(2, capacity_blocks=100)
    reps[0].used_blocks = 88
    reps[1].pending_prefill_tokens = 1000  # r0 is otherwise faster
    q = req([7, 8], session="new", rid="n")  # 2 + 4 blocks with its output: 94 > 0.9 x 100
    assert p.choose(q, reps, range(len(reps)), [0, 0], 1.0) == (1, "place")


def test_idle_sessions_count_at_their_home_weighted_by_return_chance(
    cluster: Cluster, req: Req
) -> None:
    p = AgentAware(session_idle_s=10.0)
    reps = cluster(2)
    assert p.return_probability() == 0.5  # no evidence yet
    a = req(list(range(20)), session="a", rid="a")  # 20 + 4 blocks of context
    p.on_routed(a, 0, 0.0)
    assert p.resident_blocks(0, reps[0]) == 24  # in flight: counted in full
    p.on_finished(a, 0, 1.0)
    assert p.resident_blocks(0, reps[0]) == 0.5 * 24  # between turns: weighted
    assert p.resident_blocks(0, reps[0], exclude=24) == 0
    p.choose(
        req([9]), reps, range(len(reps)), [0, 0], 11.0
    )  # quiet for 10 s: expired, counted as not returning
    assert p.resident_blocks(0, reps[0]) == 0
    assert p.return_probability() == 1 / 3
    b = req(list(range(22)), session="a", rid="b")  # it does come back: its context is cached
    assert p.choose(b, reps, range(len(reps)), [20, 0], 12.0) == (0, "affinity")
    p.on_routed(b, 0, 12.0)
    assert p.return_probability() == 2 / 4


def test_homes_expire_after_the_idle_time(cluster: Cluster, req: Req) -> None:
    p = AgentAware(session_idle_s=10.0)
    reps = cluster(2)
    q = req([1, 2], session="s")
    p.on_routed(q, 1, 0.0)
    p.on_finished(q, 1, 1.0)
    p.choose(req([9]), reps, range(len(reps)), [0, 0], 10.5)
    assert p.home_of("s") == 1  # quiet for 9.5 s only
    p.choose(req([9]), reps, range(len(reps)), [0, 0], 11.0)
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
    p.choose(req([9]), reps, range(len(reps)), [0, 0], 100.0)
    assert p.home_of("s") == 0


def test_home_not_eligible_re_places(cluster: Cluster, req: Req) -> None:
    p = AgentAware()
    reps = cluster(2)
    q = req([1, 2], session="s")
    p.on_routed(q, 0, 0.0)
    assert p.choose(q, reps, [1], [2, 0], 1.0) == (1, "place")


def test_burden_on_requests_already_there_steers_big_prefills_away(
    cluster: Cluster, req: Req
) -> None:
    p = AgentAware()
    reps = cluster(2)
    big = req(list(range(500)))  # 8,000 tokens to prefill: 0.8 s at 10,000 tokens/s
    reps[0].running, reps[0].waiting = 2, 1
    # Nothing sent to r0 yet, so nothing is expected to arrive: only the three there wait.
    assert p.burden(big, 0, reps[0], 0, 0.0) == pytest.approx(1.0 * 3 * 0.8)
    # With compute_weight 1, r0's own time counts too.
    assert AgentAware(compute_weight=1.0).burden(big, 0, reps[0], 0, 0.0) == pytest.approx(4 * 0.8)
    assert p.burden(big, 0, reps[0], 500, 0.0) == 0.0  # all cached: nothing to prefill
    # Same wait either way; r1 has nobody to hold up.
    assert p.choose(big, reps, range(len(reps)), [0, 0], 0.0) == (1, "least_time")


def _arrivals(p: AgentAware, req: Req, replica: int, times: list[float]) -> None:
    """Route a session-less request to ``replica`` at each of ``times``."""
    for k, t in enumerate(times):
        p.on_routed(req([k], rid=f"{replica}-{k}"), replica, t)


def test_expected_arrivals_follow_the_replicas_arrival_rate(req: Req) -> None:
    """Arrivals counted over rate_window_s, exponentially weighted: one a second for long
    enough is a rate of one a second; a replica never sent anything has none."""
    p = AgentAware(rate_window_s=10.0)
    _arrivals(p, req, 1, [float(t) for t in range(200)])
    # count = sum of exp(-k/10) for k = 0..199 (the last arrival at 199), over 10 s.
    decayed = sum(math.exp(-k / 10) for k in range(200))
    assert p.arrival_rate(1, 199.0) == pytest.approx(decayed / 10)
    assert p.arrival_rate(1, 199.0) == pytest.approx(1.05, abs=0.01)  # about one a second
    assert p.expected_arrivals(1, 2.0, 199.0) == pytest.approx(2 * decayed / 10)
    # Ten seconds without one: the rate decays by e.
    assert p.arrival_rate(1, 209.0) == pytest.approx(decayed / 10 / math.e)
    assert p.arrival_rate(0, 199.0) == 0.0 and p.expected_arrivals(0, 2.0, 199.0) == 0.0
    # Seen for only 1 s (two arrivals): over what there is, not over the whole window.
    q = AgentAware(rate_window_s=10.0)
    _arrivals(q, req, 0, [0.0, 1.0])
    assert q.arrival_rate(0, 1.0) == pytest.approx((math.exp(-0.1) + 1) / (10 * -math.expm1(-0.1)))
    assert p.weight(1, 2.0, 199.0) == pytest.approx(0.5 * 2 * decayed / 10)
    assert AgentAware(compute_weight=0.25).weight(1, 2.0, 199.0) == 0.25


def test_a_shared_prefix_being_prefilled_is_waited_for_where_the_other_replica_is_wanted(
    cluster: Cluster, req: Req
) -> None:
    """Session b starts while session a prefills their shared 200-block repository context on
    r0. Waiting for it there is slower for b by one block than prefilling it all on r1 (0.3248 s
    against 0.3216 s). Where nothing comes to r1, b goes there; where requests keep arriving at
    r1, the 0.32 s it would spend again counts against it."""
    repo = list(range(1000, 1200))
    b = req([*repo, 2], session="b", rid="b")  # 3,216 tokens, 200 blocks matched on r0

    def busy_r0() -> list[ReplicaState]:
        reps = cluster(2)
        reps[0].pending_prefill_tokens, reps[0].running = 3216, 1  # a's [*repo, 1], all new
        return reps

    idle = AgentAware()
    assert idle.choose(b, busy_r0(), [0, 1], [200, 0], 100.0) == (1, "place")
    wanted = AgentAware()
    _arrivals(wanted, req, 1, [90.0 + 0.5 * k for k in range(21)])  # two a second, to t = 100
    reps = busy_r0()
    arriving = wanted.arrival_rate(1, 100.0) * 0.3216
    assert arriving > 0.5
    assert wanted.burden(b, 1, reps[1], 0, 100.0) == pytest.approx(arriving / 2 * 0.3216)
    assert wanted.choose(b, reps, [0, 1], [200, 0], 100.0) == (0, "place")
    # A queue on r0 longer than the re-prefill still sends b to r1.
    reps[0].pending_prefill_tokens = 10_000
    assert wanted.choose(b, reps, [0, 1], [200, 0], 100.0) == (1, "place")
    # With the override, the constant is used whatever comes.
    assert AgentAware(compute_weight=0.0).choose(b, busy_r0(), [0, 1], [200, 0], 100.0) == (
        1,
        "place",
    )


def test_expected_decode_steps_learns_from_sessions(cluster: Cluster, req: Req) -> None:
    p = AgentAware()
    q = req([1], session="a", rid="a1", out=100)
    assert p.expected_decode_steps(q) == 100  # nothing learnt yet: this turn only
    for k in range(3):  # session a: three turns of 100 tokens; session b: one of 100
        turn = req([1], session="a", rid=f"a{k}", out=100)
        p.on_routed(turn, 0, float(k))
        p.on_finished(turn, 0, k + 0.5)
    p.on_routed(req([2], session="b", rid="b0", out=100), 1, 0.0)
    # per session 400 / 2 = 200 tokens, per turn 100: 100 more after the first turn, weighted
    # by the return chance (2 returns, no expiry yet: 3/4).
    assert p.expected_decode_steps(req([3], session="c", out=50)) == pytest.approx(50 + 0.75 * 100)
    # A session that has had more expects as much again.
    assert p.expected_decode_steps(q, had=1000) == pytest.approx(100 + 0.75 * 1000)


def test_unmeasured_replica_is_taken_to_be_like_the_measured_ones(
    cluster: Cluster, req: Req
) -> None:
    """In a gateway, rates are measured per replica as requests finish prefilling; one not yet
    measured is not assumed idle-fast (the default rate) next to a measured, busy one."""
    p = AgentAware()
    reps = cluster(2)
    reps[0].prefill_tokens_per_s = 2000.0  # measured; replica 1 not yet
    reps[0].pending_prefill_tokens = 1000  # 0.5 s queued at home
    q = req(list(range(100)))  # 1600 tokens
    # Alike: home 0.5 s (cached) vs 1600 / 2000 = 0.8 s cold elsewhere; at the default rate
    # replica 1 would have looked like 0.16 s.
    assert p.ttft(q, reps[1], 0) == pytest.approx(0.16)
    assert p.choose(q, reps, range(len(reps)), [100, 0], 0.0) == (0, "least_time")
    assert p.ttft(q, reps[1], 0) == pytest.approx(0.8)


def test_pooled_rate_takes_every_replica_at_the_mean_measured_rate(
    cluster: Cluster, req: Req
) -> None:
    """A rate learnt from time to first token mixes a replica's speed with what it was busy
    with; pooled_rate trusts only their mean (replicas alike)."""
    reps = cluster(2)
    reps[0].prefill_tokens_per_s, reps[1].prefill_tokens_per_s = 2000.0, 8000.0
    q = req(list(range(100)))  # 1600 tokens
    reps[1].pending_prefill_tokens = 4000
    # Own rates: r0 1600 / 2000 = 0.8 s, r1 5600 / 8000 = 0.7 s; pooled (5000/s): 0.32 vs 1.12 s.
    assert AgentAware(pooled_rate=False).choose(q, reps, range(len(reps)), [0, 0], 0.0) == (
        1,
        "least_time",
    )
    p = AgentAware(pooled_rate=True)
    assert p.choose(q, reps, range(len(reps)), [0, 0], 0.0) == (0, "least_time")
    assert p.ttft(q, reps[1], 0) == pytest.approx(5600 / 5000)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"compute_weight": -1.0}, ">= 0"),
        ({"externality": -0.5}, ">= 0"),
        ({"rate_window_s": 0.0}, "rate_window_s > 0"),
    ],
)
def test_a_bad_option_is_refused(option: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AgentAware(**option)
