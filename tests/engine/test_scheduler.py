"""Scheduler: token budget, chunked prefill, decodes first, FIFO, prefix hits, preemption."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvharness.engine.eviction import SessionTTL, ToolTTL
from kvharness.engine.request import Request
from kvharness.engine.scheduler import Plan, Scheduler

Make = Callable[..., Scheduler]
Req = Callable[..., Request]


@pytest.fixture
def scheduler(make_scheduler: Make) -> Make:
    return make_scheduler


@pytest.fixture
def request_(make_request: Req) -> Req:
    return make_request


def step(s: Scheduler, now: float) -> tuple[Plan, list[str]]:
    plan = s.schedule(now)
    done = s.postprocess(plan, now + 1.0)
    return plan, [r.id for r in done]


def test_chunked_prefill_under_the_token_budget(scheduler: Make, request_: Req) -> None:
    s = scheduler(16, budget=8)
    r = request_("a", 20, 2)
    s.add(r)
    chunks = []
    for t in range(3):
        plan, _ = step(s, float(t))
        chunks.append([n for _, n in plan.items])
        assert plan.batch.prefill_tokens == chunks[-1][0]
    assert chunks == [[8], [8], [4]]
    assert r.scheduled == 0.0 and r.first_token == 3.0 and r.generated == 1
    plan, done = step(s, 3.0)
    assert plan.all_decode and plan.batch.decode_seqs == 1 and plan.batch.decode_ctx == 21
    assert done == ["a"] and r.done == 4.0
    assert len(r.blocks) == 0 and s.pool.num_free == 16


def test_running_decodes_first_then_waiting_fifo(scheduler: Make, request_: Req) -> None:
    s = scheduler(32, budget=8)
    a = request_("a", 4, 5)
    s.add(a)
    step(s, 0.0)  # a prefilled, first token sampled
    b, c = request_("b", 20, 1), request_("c", 2, 1)
    s.add(b)
    s.add(c)
    plan, _ = step(s, 1.0)
    assert [(r.id, n) for r, n in plan.items] == [("a", 1), ("b", 7)]
    assert plan.blocked == "budget"
    plan, _ = step(s, 2.0)
    # c waits behind b (FIFO) even though it would fit on its own.
    assert [(r.id, n) for r, n in plan.items] == [("a", 1), ("b", 7)]
    plan, done = step(s, 3.0)
    assert [(r.id, n) for r, n in plan.items] == [("a", 1), ("b", 6), ("c", 1)]
    assert sorted(done) == ["b"]


def test_prefix_hit_counts_whole_blocks_and_recomputes_the_last_token(
    scheduler: Make, request_: Req
) -> None:
    s = scheduler(32, budget=64)
    first = request_("x", 12, 1, (1, 2, 3))
    s.add(first)
    step(s, 0.0)
    assert first.cached_tokens == 0
    # Same 3 blocks then one more: 3 blocks hit.
    second = request_("y", 17, 1, (1, 2, 3, 4))
    s.add(second)
    plan, _ = step(s, 1.0)
    assert second.cached_tokens == 12 and plan.items[0][1] == 5
    # A prompt that is entirely cached still computes its last block.
    again = request_("z", 12, 1, (1, 2, 3))
    s.add(again)
    plan, _ = step(s, 2.0)
    assert again.cached_tokens == 8 and plan.items[0][1] == 4


def test_preemption_by_recompute_when_blocks_run_out(scheduler: Make, request_: Req) -> None:
    s = scheduler(4, budget=16, block_size=4)
    a, b = request_("a", 4, 6), request_("b", 4, 6)
    s.add(a)
    s.add(b)
    step(s, 0.0)  # both prefilled: 1 block each, a token sampled each
    step(s, 1.0)  # decode: each needs a second block (5 tokens) -> 4 blocks used
    assert s.pool.num_free == 0
    for t in (2.0, 3.0, 4.0):  # tokens 6..8 still fit in 2 blocks each
        plan, _ = step(s, t)
        assert not plan.preempted
    # Now each needs a third block for token 9 and none is free: b (the latest) is preempted.
    plan, _ = step(s, 5.0)
    assert plan.preempted and [r.id for r, _ in plan.items] == ["a"]
    assert b.preemptions == 1 and b.num_computed == 0 and b.blocks == []
    assert s.waiting[0] is b and b.generated == 5
    t = 6.0
    while s.has_work:
        step(s, t)
        t += 1.0
    assert a.done is not None and b.done is not None and b.done > a.done
    assert b.generated == 6 and s.pool.num_free == 4


def test_ttl_pins_blocks_for_the_sessions_next_turn(scheduler: Make, request_: Req) -> None:
    ttls = ToolTTL(default=10.0)
    s = scheduler(4, budget=64, eviction=SessionTTL(ttls))
    a = request_("a", 8, 1, (1, 2), session="s", last=False, tool="bash")
    s.add(a)
    step(s, 0.0)
    assert s.eviction.num_pinned == 2 and s.pool.num_free == 2
    # Another session needs all 4 blocks: the pin is released early rather than refuse it.
    other = request_("o", 16, 1, (7, 8, 9, 10))
    s.add(other)
    plan, _ = step(s, 2.0)
    assert [r.id for r, _ in plan.items] == ["o"] and s.eviction.num_pinned == 0


def test_ttl_pin_expires_and_is_released_on_next_turn(scheduler: Make, request_: Req) -> None:
    ttls = ToolTTL(default=10.0)
    s = scheduler(8, budget=64, eviction=SessionTTL(ttls))
    a = request_("a", 8, 1, (1, 2), session="s", last=False)
    s.add(a)
    step(s, 0.0)
    assert s.eviction.num_pinned == 2
    nxt = request_("a2", 13, 1, (1, 2, 3), session="s", last=True)
    s.add(nxt)
    step(s, 5.0)
    assert nxt.cached_tokens == 8 and s.eviction.num_pinned == 0
    b = request_("b", 8, 1, (4, 5), session="t", last=False)
    s.add(b)
    step(s, 6.0)
    assert s.eviction.num_pinned == 2
    s.schedule(100.0)  # expiry is applied at the next scheduling after the TTL
    assert s.eviction.num_pinned == 0


def test_tool_ttl_quantile() -> None:
    t = ToolTTL(quantile=0.5, default=3.0, min_samples=2)
    assert t.ttl("bash") == 3.0
    for g in (1.0, 2.0, 3.0, 4.0):
        t.observe("bash", g)
    t.observe("read", 0.1)
    assert t.ttl("bash") == 3.0  # index int(0.5 * 4) of the sorted gaps
    assert t.ttl("read") == 2.0  # too few samples: all tools' gaps


def test_cpu_tier_brings_evicted_blocks_back_at_pcie_cost(request_: Req) -> None:
    from kvharness.engine.block_pool import BlockPool
    from kvharness.engine.events import BlockStored
    from kvharness.engine.eviction import CpuTier, make_eviction
    from kvharness.engine.scheduler import SchedulerConfig

    tier = CpuTier(capacity=8, block_bytes=1e6, bandwidth=1e9)
    tier.events_enabled = True
    pool = BlockPool(4, 4, events=True, on_evict=tier.put)
    s = Scheduler(pool, SchedulerConfig(64, 8), make_eviction("lru"), tier)
    a = request_("a", 12, 1, (1, 2, 3))
    s.add(a)
    s.postprocess(s.schedule(0.0), 1.0)
    b = request_("b", 16, 1, (7, 8, 9, 10))  # takes every block: a's three are evicted
    s.add(b)
    s.postprocess(s.schedule(1.0), 2.0)
    assert all(h in tier for h in (1, 2, 3))
    assert pool.match([1, 2, 3]) == []
    again = request_("c", 13, 1, (1, 2, 3))
    s.add(again)
    plan = s.schedule(2.0)
    assert again.cached_tokens == 12 and plan.items[0][1] == 1
    assert plan.load_seconds == pytest.approx(3 * 1e6 / 1e9)
    assert any(isinstance(e, BlockStored) and e.medium == "CPU" for e in tier.drain_events())
    assert pool.match([1, 2, 3]) != []  # back on the device, findable again
