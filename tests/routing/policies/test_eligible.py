"""Every registered policy picks only among the replicas it is offered, whatever its state."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvharness.routing.base import ReplicaState, RouteRequest
from kvharness.routing.registry import available_policies, make_policy

_load = st.tuples(
    st.integers(0, 4), st.integers(0, 4), st.integers(0, 64), st.sampled_from([0.0, 5e3, 2e4])
)


@pytest.mark.parametrize("name", available_policies())
@settings(max_examples=30, deadline=None)
@given(data=st.data(), n=st.integers(1, 6))
def test_policy_never_picks_outside_eligible(name: str, data: st.DataObject, n: int) -> None:
    policy = make_policy(name)
    reps = [ReplicaState(f"r{i}", capacity_blocks=64, block_size=16) for i in range(n)]
    inflight: list[tuple[RouteRequest, int]] = []
    now = 0.0
    for step in range(data.draw(st.integers(1, 15), label="steps")):
        loads = data.draw(st.lists(_load, min_size=n, max_size=n), label="loads")
        for r, (running, waiting, used, rate) in zip(reps, loads, strict=True):
            r.running, r.waiting, r.used_blocks, r.cached_blocks = running, waiting, used, used
            r.pending_prefill_tokens, r.prefill_tokens_per_s = 300 * waiting, rate
        eligible = sorted(
            data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n), label="eligible")
        )
        blocks = tuple(data.draw(st.lists(st.integers(1, 4), max_size=8), label="blocks"))
        session = data.draw(st.sampled_from([None, "a", "b", "c"]), label="session")
        request = RouteRequest(f"q{step}", session, blocks, 16 * len(blocks) + 5, 32)
        matched = data.draw(st.lists(st.integers(0, len(blocks)), min_size=n, max_size=n))
        now += data.draw(st.sampled_from([0.0, 0.5, 40.0, 100.0]), label="dt")
        decision = policy.choose(request, reps, eligible, matched, now)
        assert decision.replica in eligible, (decision, eligible)
        policy.on_routed(request, decision.replica, now)
        inflight.append((request, decision.replica))
        if data.draw(st.booleans(), label="finish one"):
            done, where = inflight.pop(data.draw(st.integers(0, len(inflight) - 1)))
            policy.on_finished(done, where, now)
