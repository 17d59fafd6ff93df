from __future__ import annotations

from collections.abc import Sequence

import pytest

from kvharness.engine.events import BlockStored
from kvharness.gateway.router import NoReplica, Overloaded, Routed, Router
from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest
from kvharness.routing.index import PrefixIndex
from kvharness.routing.registry import make_policy

BS = 4


def states(n: int) -> list[ReplicaState]:
    return [ReplicaState(f"r{i}", capacity_blocks=100, block_size=BS) for i in range(n)]


def req(hashes: Sequence[int] = (1, 2, 3), tokens: int = 14, rid: str = "q") -> RouteRequest:
    return RouteRequest(rid, None, tuple(hashes), tokens, 6)


class Always(Policy):
    name = "always_test"

    def __init__(self, pick: int) -> None:
        self.pick = pick
        self.offered: list[list[int]] = []

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        self.offered.append(list(eligible))
        return Decision(self.pick, "fixed")


def test_overloaded_vs_no_replica() -> None:
    r = Router(make_policy("least_outstanding"), states(2), PrefixIndex(2), max_queue=1)
    a = r.route(req(), 0.0)
    assert isinstance(a, Routed)
    r.dispatched(req(), a, 0.0)
    b = r.route(req(), 0.0)
    assert isinstance(b, Routed) and b.replica != a.replica
    r.dispatched(req(), b, 0.0)
    assert r.route(req(), 0.0) == Overloaded(1.0)  # both full, both healthy
    r.set_healthy(0, False)
    r.set_healthy(1, False)
    assert isinstance(r.route(req(), 0.0), NoReplica)


def test_exclude_and_policy_contract_fallback() -> None:
    index = PrefixIndex(3)
    index.apply(2, BlockStored((1, 2), None))
    policy = Always(0)
    r = Router(policy, states(3), index)
    # The policy insists on replica 0, which is excluded: the router falls back to the longest
    # cached prefix among the admissible ones.
    out = r.route(req(), 0.0, exclude=frozenset({0}))
    assert out == Routed(2, "fallback", 2)
    assert policy.offered == [[1, 2]]
    assert r.healthy == [True, True, True]  # an exclusion is this request's, not a health mark
    assert [s.cached_blocks for s in r.states] == [0, 0, 2]  # the policy saw the index's sizes


def test_policy_is_offered_only_healthy_replicas_below_the_queue_limit() -> None:
    policy = Always(1)
    r = Router(policy, states(4), PrefixIndex(4), max_queue=1)
    r.set_healthy(0, False)
    first = r.route(req(), 0.0)
    assert first == Routed(1, "fixed", 0)
    r.dispatched(req(), first, 0.0)  # replica 1 is now at its queue limit
    assert r.route(req(), 1.0) == Routed(2, "fallback", 0)
    r.set_healthy(0, True)
    r.route(req(), 2.0)
    assert policy.offered == [[1, 2, 3], [2, 3], [0, 2, 3]]
    assert [r.admissible(i) for i in range(4)] == [True, False, True, True]


def test_bookkeeping_and_own_decisions_feed_the_index() -> None:
    index = PrefixIndex(2)
    r = Router(make_policy("round_robin"), states(2), index)
    first = r.route(req(), 0.0)
    assert isinstance(first, Routed)
    flights = []
    for t in range(2):
        out = r.route(req(rid=str(t)), float(t))
        assert isinstance(out, Routed)
        flights.append(r.dispatched(req(rid=str(t)), out, float(t)))
    # Each replica is taken to hold what it was sent, before any event says so.
    assert index.match((1, 2, 3)) == [3, 3]
    s1 = r.states[flights[1].replica]
    assert s1.running == 1 and s1.pending_prefill_tokens == 14 and s1.used_blocks == 5
    r.first_token(flights[1], 2.0)
    assert s1.pending_prefill_tokens == 0
    r.finished(flights[1], 3.0)
    assert s1.running == 0 and s1.used_blocks == 0 and r.inflight[flights[1].replica] == 0


def test_prefill_rate_is_learned() -> None:
    r = Router(make_policy("round_robin"), states(1), PrefixIndex(1))
    out = r.route(req(hashes=(), tokens=400), 0.0)
    assert isinstance(out, Routed)
    f = r.dispatched(req(hashes=(), tokens=400), out, 10.0)
    r.first_token(f, 10.5)
    assert r.states[0].prefill_tokens_per_s == pytest.approx(800.0)
    # Two at once: the second's first token also waited for the first's 400 tokens.
    a = r.dispatched(req(rid="a", hashes=(), tokens=400), out, 20.0)
    b = r.dispatched(req(rid="b", hashes=(), tokens=400), out, 20.0)
    assert b.ahead_tokens == 400
    r.first_token(a, 20.5)
    r.first_token(b, 21.0)
    assert r.states[0].prefill_tokens_per_s == pytest.approx(800.0)


def test_down_replica_keeps_its_index_entries_until_forgotten() -> None:
    index = PrefixIndex(2)
    index.apply(1, BlockStored((1, 2), None))
    r = Router(make_policy("round_robin"), states(2), index)
    assert r.set_healthy(1, False) and not r.set_healthy(1, False)
    assert index.cached_blocks(1) == 2
    r.forget(1)
    assert index.cached_blocks(1) == 0


def test_engine_load_splits_in_flight() -> None:
    r = Router(make_policy("round_robin"), states(1), PrefixIndex(1))
    for t in range(3):
        out = r.route(req(rid=str(t)), 0.0)
        assert isinstance(out, Routed)
        r.dispatched(req(rid=str(t)), out, 0.0)
    r.observe_engine(0, waiting=5, kv_usage=0.5)
    s = r.states[0]
    assert (s.running, s.waiting, s.used_blocks) == (0, 3, 50)


def test_index_size_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match="index has 1 replicas"):
        Router(make_policy("round_robin"), states(2), PrefixIndex(1))
