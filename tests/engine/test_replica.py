"""Replica: the closed-form decode jump gives the same per-request times as stepping one by one."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

import pytest

from kvharness.engine.replica import Replica
from kvharness.engine.request import Request
from kvharness.engine.scheduler import SchedulerConfig


def drive(
    rep: Replica, arrivals: list[tuple[float, Request]]
) -> dict[str, tuple[float | None, float | None, float | None, int | None]]:
    """A minimal event loop: arrivals before wake-ups at equal times, stale wake-ups dropped."""
    heap: list[tuple[float, int, int, Any]] = []
    seq = 0
    for t, r in arrivals:
        seq += 1
        heap.append((t, 0, seq, r))
    heapq.heapify(heap)
    out = {}
    while heap:
        t, prio, _, x = heapq.heappop(heap)
        if prio == 0:
            w = rep.submit(x, t)
        else:
            if x != rep.version:
                continue
            for r in rep.wake(t):
                out[r.id] = (r.scheduled, r.first_token, r.done, r.cached_tokens)
            w = rep.next_wake
        if w is not None:
            seq += 1
            heapq.heappush(heap, (w, 1, seq, rep.version))
    return out


def workload(seed: int, n: int) -> list[tuple[float, Request]]:
    rng = random.Random(seed)
    out = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(2.0)
        shared = rng.randrange(3)
        prompt = rng.randrange(20, 400)
        hashes = tuple(
            shared * 10_000 + j if j < 5 else i * 10_000 + j for j in range(prompt // 16)
        )
        out.append((t, Request(f"q{i}", hashes, prompt, rng.randrange(1, 300), t)))
    return out


@pytest.mark.parametrize("blocks", [None, 60])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jump_equals_stepping(
    make_deployment: Callable[..., Any], seed: int, blocks: int | None
) -> None:
    dep = make_deployment(block_size=16)
    cfg = SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8)
    results = []
    stats = []
    for jump in (False, True):
        rep = Replica("r", dep, cfg, num_blocks=blocks, jump=jump)
        results.append(drive(rep, workload(seed, 40)))
        stats.append((rep.steps, rep.events_processed, rep.scheduler.num_preemptions))
    step, jump_ = results
    assert step.keys() == jump_.keys() and len(step) == 40
    for k, (s, f, d, c) in step.items():
        s2, f2, d2, c2 = jump_[k]
        assert c == c2
        assert s == pytest.approx(s2, rel=1e-9, abs=1e-9)
        assert f == pytest.approx(f2, rel=1e-9, abs=1e-9)
        assert d == pytest.approx(d2, rel=1e-9, abs=1e-9)
    # Same engine steps, far fewer wake-ups.
    assert stats[0][0] == stats[1][0]
    assert stats[1][1] < stats[0][1] / 3
    if blocks:
        assert stats[0][2] == stats[1][2] > 0  # the small pool forced preemptions


def test_idle_replica_wakes_at_submit_and_reports_state(
    make_deployment: Callable[..., Any],
) -> None:
    rep = Replica("r", make_deployment(block_size=16), num_blocks=100)
    assert rep.idle
    r = Request("a", (), 40, 3, 1.0)
    assert rep.submit(r, 1.0) == 1.0
    assert rep.waiting == 1 and rep.pending_prefill_tokens == 40
    assert rep.submit(Request("b", (), 40, 3, 1.0), 1.0) is None  # already due to wake
    rep.wake(1.0)
    assert rep.running == 2 and rep.waiting == 0
    assert rep.pending_prefill_tokens == 0 and rep.used_blocks == 6
    assert rep.next_wake is not None and rep.next_wake > 1.0
    assert rep.prefill_tokens_per_s > 0
