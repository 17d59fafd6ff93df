"""Shared-prefix (cascade) decode attention: the cost model's KV bytes, the block counting, and a
replica whose sessions share a prefix."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from kvharness.engine.cascade import SharedBlocks, merge_tokens
from kvharness.engine.cost import HARDWARE, MODELS, CostModel, Deployment, StepBatch
from kvharness.engine.replica import Replica
from kvharness.engine.request import Request
from kvharness.engine.scheduler import SchedulerConfig

from .test_replica import drive, workload


def model(name: str = "llama-3.3-70b", tp: int = 1) -> CostModel:
    return CostModel(Deployment(HARDWARE["H200"], MODELS[name], tp=tp))


# -- cost model --------------------------------------------------------------------------------


def test_cascade_reads_the_shared_prefix_once_and_keeps_the_flops() -> None:
    # 4 sequences share a 1000-token prefix and have 100 tokens each of their own: a paged kernel
    # reads 4 x 1100 tokens of KV, a cascade kernel 1000 + 4 x 100.
    cm = model()
    dep = cm.deployment
    paged = StepBatch(decode_seqs=4, decode_ctx=4400)
    cascade = paged._replace(decode_kv_read=1400)
    f_paged, b_paged, _ = cm.terms(paged)
    f_casc, b_casc, _ = cm.terms(cascade)
    assert f_casc == f_paged  # every query still attends to every key
    bw = dep.hardware.hbm_bandwidth
    assert b_paged == pytest.approx((dep.weight_bytes + dep.kv_bytes_per_token * 4404) / bw)
    assert b_casc == pytest.approx((dep.weight_bytes + dep.kv_bytes_per_token * 1404) / bw)
    assert b_paged - b_casc == pytest.approx(dep.kv_bytes_per_token * 3000 / bw)
    assert cm.step_time(cascade) < cm.step_time(paged)
    assert cm.decode_attention_time(4, 4400, 1400) < cm.decode_attention_time(4, 4400)


def test_nothing_read_less_is_exactly_the_default() -> None:
    cm = model(tp=2)
    b = StepBatch(512, 512 * 800.5, 1056, 16, 16 * 3000)
    assert b.decode_kv_read is None and b.decode_kv == b.decode_ctx
    assert cm.step_time(b._replace(decode_kv_read=b.decode_ctx)) == cm.step_time(b)
    assert cm.terms(b._replace(decode_kv_read=b.decode_ctx)) == cm.terms(b)
    assert cm.decode_run_time(16, 48_000, 50, 48_000) == cm.decode_run_time(16, 48_000, 50)


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize(
    "seqs,ctx,kv",
    [(2, 2 * 5000, 5000 + 2 * 10), (64, 64 * 30_000, 30_000 + 64 * 500), (8, 800, 790)],
)
def test_decode_run_closed_form_matches_stepping_under_cascade(
    tp: int, seqs: int, ctx: int, kv: int
) -> None:
    # The shared part stays fixed; context and distinct reads both grow by one per sequence.
    cm = model(tp=tp)
    total = 0.0
    for k in range(1, 400):
        j = k - 1
        total += cm.decode_step_time(seqs, ctx + seqs * j, kv + seqs * j)
        assert cm.decode_run_time(seqs, ctx, k, kv) == pytest.approx(total, rel=1e-9)
    m = cm.decode_steps_until(seqs, ctx, total * 0.5, 399, kv)
    assert (
        cm.decode_run_time(seqs, ctx, m, kv)
        >= total * 0.5
        > cm.decode_run_time(seqs, ctx, m - 1, kv)
    )
    assert cm.decode_run_time(seqs, ctx, 399, kv) < cm.decode_run_time(seqs, ctx, 399)


def test_merge_cost_is_three_fp32_states_per_query_head() -> None:
    # Llama-3.3-70B: 3 x 64 heads x 129 x 4 B per layer against 2 x 8 x 128 x 2 B of KV per layer.
    dep = Deployment(HARDWARE["H200"], MODELS["llama-3.3-70b"])
    assert merge_tokens(dep) == 25  # ceil(99072 / 4096)
    assert merge_tokens(Deployment(HARDWARE["H200"], MODELS["llama-3.1-8b"])) == 13


# -- counting shared blocks --------------------------------------------------------------------


def holder(name: str, blocks: list[int], hashed: int | None = None) -> Request:
    r = Request(name, (), 16 * len(blocks) + 1, 10, 0.0)
    r.blocks = list(blocks)
    r.num_hashed = len(blocks) if hashed is None else hashed
    return r


def brute(reqs: list[Request]) -> tuple[int, int, int]:
    refs = Counter(b for r in reqs for b in r.blocks[: r.num_hashed])
    dup = sum(n - 1 for n in refs.values())
    reads = sum(n for n in refs.values() if n > 1)
    sharers = sum(1 for r in reqs if r.num_hashed and refs[r.blocks[0]] > 1)
    return dup, reads, sharers


def test_shared_blocks_hand_worked() -> None:
    a = holder("a", [0, 1, 2, 3])  # system prompt 0-1, repo 2-3
    b = holder("b", [0, 1, 2, 3, 9])  # same repo, one block of its own
    c = holder("c", [0, 1, 7], hashed=2)  # other repo; block 7 is a decode block: not shareable
    d = holder("d", [5, 6])  # shares nothing
    s = SharedBlocks([a, d])
    assert (s.duplicates, s.shared_reads, s.sharers) == (0, 0, 0)
    s.add(b)
    assert (s.duplicates, s.shared_reads, s.sharers) == (4, 8, 2)
    s.add(c)
    assert (s.duplicates, s.shared_reads, s.sharers) == (6, 10, 3)
    s.discard(a)
    assert (s.duplicates, s.shared_reads, s.sharers) == (2, 4, 2)
    s.discard(a)  # not counted any more: no-op
    s.discard(b)
    assert (s.duplicates, s.shared_reads, s.sharers) == (0, 0, 0)
    assert len(s) == 2 and c in s and b not in s


def test_shared_blocks_follow_random_joins_and_leaves() -> None:
    rng = random.Random(7)
    s = SharedBlocks()
    live: list[Request] = []
    for i in range(400):
        if live and rng.random() < 0.45:
            s.discard(live.pop(rng.randrange(len(live))))
        else:
            prefix = rng.choice([[], [0], [0, 1, 2], [0, 1, 2, 3, 4], [10, 11]])
            r = holder(f"r{i}", prefix + [1000 + 10 * i + j for j in range(rng.randrange(4))])
            s.add(r)
            live.append(r)
        assert (s.duplicates, s.shared_reads, s.sharers) == brute(live)


# -- scheduler and replica ---------------------------------------------------------------------

PREFIX = tuple(range(1, 41))  # 40 blocks of 16 tokens: 640 shared tokens


def sessions(n: int, own: int = 3) -> list[tuple[float, Request]]:
    """``n`` requests, one after another, each the shared 640-token prefix plus ``own`` blocks
    and a few tokens of its own; long outputs so that they decode together."""
    out = []
    for i in range(n):
        hashes = PREFIX + tuple(10_000 * (i + 1) + j for j in range(own))
        prompt = 16 * len(hashes) + 5
        out.append((0.01 * i, Request(f"s{i}", hashes, prompt, 200, 0.01 * i)))
    return out


def test_scheduler_plans_the_distinct_reads(make_deployment: Callable[..., Any]) -> None:
    dep = make_deployment(block_size=16)
    rep = Replica("r", dep, attention="cascade", num_blocks=2000)
    reqs = [r for _, r in sessions(4)]
    for r in reqs:
        rep.submit(r, 0.0)
    while not all(r.decoding for r in reqs):
        rep.wake(rep.next_wake or 0.0)
    plan = rep.scheduler.schedule(1.0)
    b = plan.batch
    assert b.decode_seqs == 4 and b.decode_ctx == sum(r.num_tokens for r in reqs)
    # 3 of the 4 copies of the 40 shared blocks are not read, each of the 4 pays the merge.
    assert b.decode_kv_read == b.decode_ctx - 3 * 40 * 16 + 4 * merge_tokens(dep)
    assert plan.shared_kv == 40 * 16  # the shared blocks, read once


def test_sessions_sharing_a_prefix_decode_faster_only_under_cascade(
    make_deployment: Callable[..., Any],
) -> None:
    dep = make_deployment(block_size=16)
    cfg = SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=16)
    runs = {}
    for attention, track in (("default", False), ("default", True), ("cascade", False)):
        rep = Replica("r", dep, cfg, attention=attention, track_shared=track, num_blocks=4000)
        done = drive(rep, sessions(12))
        runs[attention, track] = (done, rep)
    base, base_rep = runs["default", False]
    tracked, tracked_rep = runs["default", True]
    casc, casc_rep = runs["cascade", False]
    assert tracked == base  # measuring the sharing changes nothing
    assert tracked_rep.decode_seconds == base_rep.decode_seconds
    assert base_rep.shared_kv_seconds == 0 < tracked_rep.shared_kv_seconds
    # Same steps; each decode step that batches sharers reads less.
    assert casc_rep.decode_steps == base_rep.decode_steps
    assert casc_rep.decode_seconds < base_rep.decode_seconds
    assert 0 < casc_rep.shared_kv_seconds < tracked_rep.shared_kv_seconds
    for k, (_, _, end, cached) in base.items():
        assert casc[k][3] == cached
        assert casc[k][2] is not None and end is not None and casc[k][2] <= end + 1e-12


def test_nothing_shared_gives_the_default_times(make_deployment: Callable[..., Any]) -> None:
    dep = make_deployment(block_size=16)
    out = []
    for attention in ("default", "cascade"):
        arrivals = [
            (t, Request(r.id, tuple(h + 10**6 * i for h in r.block_hashes), r.prompt_tokens,
                        r.output_tokens, t))
            for i, (t, r) in enumerate(sessions(6))
        ]  # fmt: skip
        out.append(drive(Replica("r", dep, attention=attention, num_blocks=4000), arrivals))
    assert out[0] == out[1]


@pytest.mark.parametrize("blocks", [None, 60])
@pytest.mark.parametrize("seed", [0, 1])
def test_jump_equals_stepping_under_cascade(
    make_deployment: Callable[..., Any], seed: int, blocks: int | None
) -> None:
    dep = make_deployment(block_size=16)
    cfg = SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8)
    step, jump = (
        drive(Replica("r", dep, cfg, num_blocks=blocks, jump=j, attention="cascade"),
              workload(seed, 40))
        for j in (False, True)
    )  # fmt: skip
    assert step.keys() == jump.keys() and len(step) == 40
    for k, (s, f, d, c) in step.items():
        assert jump[k][3] == c
        assert jump[k][:3] == pytest.approx((s, f, d), rel=1e-9, abs=1e-9)


def test_unknown_attention_is_refused(make_deployment: Callable[..., Any]) -> None:
    with pytest.raises(ValueError, match="unknown attention 'flash'; choose from default, cascade"):
        Replica("r", make_deployment(), attention="flash")
