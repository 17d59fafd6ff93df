"""Vision encoders: FLOPs and parameters from the spec, encoder time in steps, the encoder cache."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import replace

import pytest

from kvharness.engine.block_pool import BlockPool
from kvharness.engine.cost import HARDWARE, MODELS, CostModel, Deployment, StepBatch
from kvharness.engine.eviction import make_eviction
from kvharness.engine.replica import Replica
from kvharness.engine.request import Request
from kvharness.engine.scheduler import Scheduler, SchedulerConfig
from kvharness.engine.vision import QWEN25_VL_VIT, EncoderCache, EncoderInput, VisionSpec

BS = 16
VL7B = MODELS["qwen2.5-vl-7b"]


def deployment(model: str = "qwen2.5-vl-7b", hw: str = "H100", **kw: object) -> Deployment:
    return Deployment(HARDWARE[hw], MODELS[model], block_size=BS, **kw)  # type: ignore[arg-type]


def request(
    name: str,
    prompt: int,
    images: tuple[EncoderInput, ...] = (),
    *,
    hashes: tuple[int, ...] | None = None,
    output: int = 2,
) -> Request:
    """A request whose blocks are its own (no prefix shared) unless ``hashes`` are given."""
    if hashes is None:
        hashes = tuple(hash((name, j)) for j in range(prompt // BS))
    return Request(name, hashes, prompt, output, 0.0, images=images)


def drive(rep: Replica, arrivals: list[tuple[float, Request]]) -> None:
    """Submit each request at its time and run the replica until it is idle."""
    heap: list[tuple[float, int, int, Request | int]] = []
    for seq, (t, r) in enumerate(arrivals):
        heap.append((t, 0, seq, r))
    heapq.heapify(heap)
    seq = len(heap)
    while heap:
        t, prio, _, x = heapq.heappop(heap)
        if prio == 0:
            assert isinstance(x, Request)
            w = rep.submit(x, t)
        else:
            if x != rep.version:
                continue
            rep.wake(t)
            w = rep.next_wake
        if w is not None:
            seq += 1
            heapq.heappush(heap, (w, 1, seq, rep.version))


# -- the encoder's size and work -------------------------------------------------------------


def test_flops_of_a_small_windowed_vit_match_a_hand_count() -> None:
    # 8 x 8 patches (64), windows of 56 px = 4 x 4 patches (four windows of 16), layer 1 full.
    v = VisionSpec("tiny", 2, 64, 128, 4, 96, patch=14, merge=2, window=56, full_layers=(1,))
    p, h, i = 64, 64, 128
    embed = 2 * p * (3 * 2 * 14 * 14) * h
    qkvo = 4 * (2 * p * h * h)
    mlp = 2 * (2 * p * h * i) + 2 * p * i * h
    full_attn = 2 * (2 * p * p * h)  # scores and values over all 64 x 64 pairs
    window_attn = 4 * 2 * (2 * 16 * 16 * h)  # four windows of 16 patches
    tokens = p // 4
    merger = 2 * tokens * (256 * 256) + 2 * tokens * (256 * 96)
    hand = embed + 2 * (qkvo + mlp) + full_attn + window_attn + merger
    assert v.flops(p) == hand
    # No windows: every layer attends to the whole image.
    plain = replace(v, window=0, full_layers=())
    assert plain.flops(p) == hand - window_attn + full_attn


def test_the_7b_preset_has_qwen25_vl_vision_tower_of_067b_params() -> None:
    enc = VL7B.encoder
    assert enc is not None and enc == QWEN25_VL_VIT
    assert (enc.layers, enc.hidden, enc.intermediate, enc.heads) == (32, 1280, 3420, 16)
    assert (enc.patch, enc.merge, enc.window, enc.full_layers) == (14, 2, 112, (7, 15, 23, 31))
    assert 0.67e9 < enc.params < 0.68e9
    big = MODELS["qwen2.5-vl-72b"].encoder
    assert big is not None and big.out_hidden == 8192 and 0.69e9 < big.params < 0.71e9
    # Its weights (bf16) take memory beside the language model's.
    dep = deployment()
    assert dep.weight_bytes == pytest.approx(7.62e9 * 1.0 + enc.params * 2.0)
    assert MODELS["llama-3.1-8b"].encoder is None


def test_encoder_time_grows_with_patches_and_runs_compute_bound() -> None:
    cm = CostModel(deployment())
    times = [cm.encoder_time((t,)) for t in (256, 512, 1024, 2048, 4096)]
    assert all(a < b for a, b in itertools.pairwise(times))
    # Linear layers dominate, full-attention layers add a P^2 term: doubling an image a bit
    # more than doubles its time.
    for a, b in itertools.pairwise(times[1:]):
        assert 2.0 < b / a < 2.4
    assert cm.encoder_time(()) == 0.0
    # Two images in one step read the weights once: it shows on small ones (memory bound);
    # large ones are compute bound, and two take twice one.
    assert cm.encoder_time((16, 16)) < 1.5 * cm.encoder_time((16,))
    assert cm.encoder_time((1024, 1024)) == pytest.approx(2 * cm.encoder_time((1024,)))
    with pytest.raises(ValueError, match="no vision encoder"):
        CostModel(deployment("llama-3.1-8b")).encoder_time((100,))


def test_tensor_parallel_splits_the_encoder_and_adds_its_all_reduces() -> None:
    one = CostModel(deployment("qwen2.5-vl-72b", "H200", tp=2)).encoder_time((2048,))
    four = CostModel(deployment("qwen2.5-vl-72b", "H200", tp=4)).encoder_time((2048,))
    assert four < one < 2.2 * four


# -- the step that encodes ----------------------------------------------------------------


def scheduler(budget: int = 8192, cache: int = 16384, blocks: int = 4096) -> Scheduler:
    return Scheduler(
        BlockPool(blocks, BS),
        SchedulerConfig(budget, 64),
        make_eviction("lru"),
        encoder=EncoderCache(cache, max(budget, cache)),
    )


def test_a_step_that_starts_an_uncached_image_is_longer_by_its_encoder_time() -> None:
    cm = CostModel(deployment())
    image = EncoderInput(100, 1260, 7)
    with_image = scheduler()
    with_image.add(request("a", 1500, (image,)))
    plan = with_image.schedule(0.0)
    without = scheduler()
    without.add(request("a", 1500))
    text = without.schedule(0.0)
    assert plan.batch.encoder_images == (1260,) and [t for _, t in plan.encodes] == [1260]
    assert plan.batch._replace(encoder_images=()) == text.batch
    extra = cm.step_time(plan.batch) - cm.step_time(text.batch)
    assert extra == pytest.approx(cm.encoder_time((1260,)), rel=1e-12)


def test_the_image_is_encoded_whole_in_the_step_whose_chunk_reaches_it() -> None:
    s = scheduler(budget=64)
    r = request("a", 260, (EncoderInput(100, 128, 7),))
    s.add(r)
    encoded = []
    for t in range(5):
        plan = s.schedule(float(t))
        encoded.append(plan.batch.encoder_images)
        s.postprocess(plan, t + 1.0)
    # Chunks [0,64) [64,128) [128,192) [192,256) [256,260): the second reaches the image.
    assert encoded == [(), (128,), (), (), ()]
    enc = s.encoder
    assert enc is not None and enc.encoded == 1 and enc.hits == 0
    # Consumed: cached but no longer referenced, so evictable.
    assert 7 in enc and enc.freeable == enc.capacity and r.image_cursor == 1


def test_an_image_that_does_not_fit_the_encoder_cache_cuts_the_chunk_before_it() -> None:
    s = scheduler(cache=300)
    a = request("a", 400, (EncoderInput(10, 200, 1),))
    b = request("b", 400, (EncoderInput(10, 200, 2),))
    s.add(a)
    s.add(b)
    plan = s.schedule(0.0)
    # a holds 200 of 300 tokens until its prefill passes the image; b computes its 10 text
    # tokens only.
    assert [(r.id, n) for r, n in plan.items] == [("a", 400), ("b", 10)]
    assert plan.batch.encoder_images == (200,)
    s.postprocess(plan, 1.0)
    plan = s.schedule(1.0)
    assert plan.batch.encoder_images == (200,)  # a's image is evicted to make room
    assert s.encoder is not None and s.encoder.evictions == 1


# -- the encoder cache across requests -----------------------------------------------------


def test_an_image_still_in_the_encoder_cache_is_not_encoded_again() -> None:
    rep = Replica("r", deployment())
    shot = 0xFEED
    # Different text before the same screenshot: no prefix-cache hit reaches the image.
    a = request("a", 2000, (EncoderInput(300, 1260, shot),))
    b = request("b", 2000, (EncoderInput(300, 1260, shot),))
    drive(rep, [(0.0, a), (5.0, b)])
    enc = rep.encoder
    assert enc is not None
    assert (enc.encoded, enc.hits, enc.prefix_cached) == (1, 1, 0)
    assert a.encoder_seconds == pytest.approx(rep.cost.encoder_time((1260,)))
    assert b.encoder_seconds == 0.0
    assert rep.encoder_seconds == pytest.approx(a.encoder_seconds)
    # The hit made b's first token come sooner than a's, by the encoder time.
    assert a.first_token is not None and b.first_token is not None
    ttft_a, ttft_b = a.first_token - 0.0, b.first_token - 5.0
    assert ttft_a - ttft_b == pytest.approx(a.encoder_seconds, rel=1e-9)


def test_a_prefix_cached_image_costs_no_encoder_time() -> None:
    # The encoder cache holds one image, so b's screenshot is gone from it when c comes.
    rep = Replica("r", deployment(), encoder_cache_tokens=1260)
    shot = EncoderInput(300, 1260, 11)
    base = tuple(range(1000, 1000 + 2000 // BS))
    a = request("a", 2000, (shot,), hashes=base)
    b = request("b", 2000, (EncoderInput(300, 1260, 12),))
    # c extends a's prompt: its prefix-cache hit covers a's screenshot.
    c = request("c", 2400, (shot,), hashes=base + tuple(range(5000, 5025)))
    drive(rep, [(0.0, a), (5.0, b), (10.0, c)])
    enc = rep.encoder
    assert enc is not None
    assert c.cached_tokens is not None and c.cached_tokens >= shot.end
    assert c.encoder_seconds == 0.0
    assert (enc.encoded, enc.hits, enc.prefix_cached) == (2, 0, 1)
    assert 11 not in enc  # evicted from the encoder cache: only the prefix cache had it


def test_a_text_model_ignores_images_and_its_steps_are_unchanged() -> None:
    rep = Replica("r", deployment("llama-3.1-8b"))
    plain = Replica("p", deployment("llama-3.1-8b"))
    r = request("a", 2000, (EncoderInput(300, 1260, 5),))
    q = request("a", 2000)
    drive(rep, [(0.0, r)])
    drive(plain, [(0.0, q)])
    assert rep.encoder is None and rep.encoder_seconds == 0.0
    assert (r.first_token, r.done) == (q.first_token, q.done)


def test_preemption_releases_the_images_a_request_holds() -> None:
    enc = EncoderCache(1000, 1000)
    a = request("a", 400, (EncoderInput(10, 200, 1),))
    enc.allocate(a, 1, 200)
    assert enc.holds(a, 1) and enc.freeable == 800
    enc.release_all(a, a.images)
    assert not enc.holds(a, 1) and enc.freeable == 1000 and 1 in enc
    b = request("b", 400)
    assert enc.acquire(b, 1) and enc.freeable == 800


def test_step_batch_defaults_keep_text_steps_as_they_were() -> None:
    cm = CostModel(deployment())
    b = StepBatch(4096, 4096 * 2048.5, 4096, 8, 8000)
    assert b.encoder_images == ()
    assert cm.step_time(b) == cm.step_time(b._replace(encoder_images=()))
