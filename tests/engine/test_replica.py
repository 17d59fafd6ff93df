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


def drive_shared(
    reps: list[Replica], arrivals: list[tuple[float, int, Request]]
) -> dict[str, tuple[float | None, float | None, float | None]]:
    """:func:`drive` for replicas that may share a core: a wake-up re-times its peers."""
    heap: list[tuple[float, int, int, int, Any]] = []
    seq = 0
    for t, i, r in arrivals:
        seq += 1
        heap.append((t, 0, seq, i, r))
    heapq.heapify(heap)
    out = {}

    def push(i: int) -> None:
        nonlocal seq
        w = reps[i].next_wake
        if w is not None:
            seq += 1
            heapq.heappush(heap, (w, 1, seq, i, reps[i].version))

    while heap:
        t, prio, _, i, x = heapq.heappop(heap)
        rep = reps[i]
        if prio == 0:
            if rep.submit(x, t) is not None:
                push(i)
            continue
        if x != rep.version:
            continue
        for r in rep.wake(t):
            out[r.id] = (r.scheduled, r.first_token, r.done)
        push(i)
        for peer in rep.retimed:
            push(reps.index(peer))
    return out


def _pair(dep: Any, shared: bool, jump: bool = True) -> list[Replica]:
    cfg = SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8)
    reps = [Replica(f"r{i}", dep, cfg, num_blocks=200, jump=jump) for i in range(2)]
    if shared:
        reps[0].core_peers, reps[1].core_peers = [reps[1]], [reps[0]]
    return reps


def test_two_replicas_on_one_core_each_take_twice_as_long(
    make_deployment: Callable[..., Any],
) -> None:
    dep = make_deployment(block_size=16)

    def req(name: str) -> Request:
        return Request(name, (), 300, 50, 0.0)

    alone = drive_shared(_pair(dep, shared=True), [(0.0, 0, req("a"))])["a"][2]
    apart = drive_shared(_pair(dep, shared=False), [(0.0, 0, req("a")), (0.0, 1, req("b"))])
    both = drive_shared(_pair(dep, shared=True), [(0.0, 0, req("a")), (0.0, 1, req("b"))])
    assert alone is not None and alone > 0
    assert (
        apart["a"][2] == apart["b"][2] == pytest.approx(alone, rel=1e-12)
    )  # an idle peer costs nothing
    assert both["a"][2] == pytest.approx(2 * alone, rel=1e-9)
    assert both["b"][2] == pytest.approx(2 * alone, rel=1e-9)


def test_a_peer_that_goes_idle_gives_its_share_back(
    make_deployment: Callable[..., Any],
) -> None:
    dep = make_deployment(block_size=16)
    alone = drive_shared(_pair(dep, shared=True), [(0.0, 0, Request("a", (), 300, 400, 0.0))])
    short = drive_shared(
        _pair(dep, shared=True),
        [(0.0, 0, Request("a", (), 300, 400, 0.0)), (0.0, 1, Request("b", (), 300, 10, 0.0))],
    )
    a_alone, a_short, b_done = alone["a"][2], short["a"][2], short["b"][2]
    assert a_alone is not None and a_short is not None and b_done is not None
    # "a" ran at half speed while "b" ran, then at full speed: it lost b's time, no more.
    assert b_done < a_short
    assert a_short == pytest.approx(a_alone + b_done / 2, rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shared_core_jump_equals_stepping(make_deployment: Callable[..., Any], seed: int) -> None:
    dep = make_deployment(block_size=16)

    def arrivals() -> list[tuple[float, int, Request]]:
        return [(t, k % 2, r) for k, (t, r) in enumerate(workload(seed, 40))]

    step, jump = (drive_shared(_pair(dep, True, jump=j), arrivals()) for j in (False, True))
    apart = drive_shared(_pair(dep, False), arrivals())
    assert sum(d or 0.0 for _, _, d in step.values()) > sum(d or 0.0 for _, _, d in apart.values())
    assert step.keys() == jump.keys() and len(step) == 40
    for k, times in step.items():
        assert times == pytest.approx(jump[k], rel=1e-9, abs=1e-9)
