"""Images in the simulator: encoder time in TTFT and busy time, the sim summary's vision figures."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from kvharness.errors import UserError
from kvharness.report.io import parse_deadline
from kvharness.sim.cluster import parse_cluster
from kvharness.sim.simulator import SimConfig, SimResult, Simulator
from kvharness.sim.summary import VisionStats, render_rows, vision_stats
from kvharness.sim.sweep import SimJob, run_job
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.images import Image, grid_tokens
from kvharness.workload.model import Arrival, Session, Turn, Workload
from kvharness.workload.synthetic import SyntheticConfig, generate

BS = 16
SHOT = grid_tokens(1280, 800)  # 1,260 placeholder tokens


def computer_use(
    sessions: int = 3, steps: int = 5, *, text_only: bool = False, rate: float = 0.05
) -> Workload:
    """Sessions of a screenshot loop: a shared system prompt, then per step a screenshot and the
    model's action; each turn re-sends everything before it (the prompt grows by one screenshot
    a turn). ``text_only`` puts text of the same length where the screenshots were."""
    out = []
    for s in range(sessions):
        b = ChainBuilder(BS)
        b.extend_segment(1, 600)  # system prompt and task, shared by all sessions
        b.extend_segment(100 + s, 50)  # this session's instruction
        images: list[Image] = []
        turns = []
        for k in range(steps):
            h = (s * 1000 + k) * 7919 + 1
            if text_only:
                b.extend_segment(h, SHOT)
            else:
                images.append(Image(b.num_tokens, SHOT, 1280, 800, h))
                b.extend_image(h, SHOT)
            turns.append(Turn(b.chain(), 60, gap=0.0 if k == 0 else 1.0, images=tuple(images)))
            b.extend_segment(h + 1, 60)  # the action the model wrote
        out.append(Session(f"s{s}", tuple(turns)))
    return Workload(tuple(out), BS, arrival=Arrival("poisson", rate=rate, seed=1))


def run(wl: Workload, cluster: str = "2xH200:qwen2.5-vl-7b", policy: str = "session") -> SimResult:
    return Simulator(wl, SimConfig(parse_cluster(cluster, block_size=BS), policy)).run()


def test_an_image_workload_runs_and_reports_what_its_images_cost() -> None:
    wl = computer_use()
    res = run(wl)
    assert len(res.records) == wl.num_turns and all(r.ok for r in res.records)
    assert res.has_images and res.images == sum(len(t.images) for _, _, t in wl.turns())
    v = vision_stats(res)
    assert v is not None
    assert v.image_tokens == sum(t.image_tokens for _, _, t in wl.turns())
    # A session stays on one replica: each screenshot is encoded once. Later turns find the
    # earlier ones in the prefix cache, but for the newest: the previous prompt ended inside
    # it, in a partial block that was never cached, so that block is computed again with the
    # encoder's output, which the encoder cache still has.
    assert v.images_encoded == 3 * 5
    assert v.encoder_cache_hits == 3 * 4
    assert v.images_prefix_cached == res.images - v.images_encoded - v.encoder_cache_hits
    assert v.encoder_share is not None and 0.0 < v.encoder_share < 1.0
    assert v.image_token_share is not None and 0.5 < v.image_token_share < 1.0
    # The TTFT split adds up to the mean TTFT.
    ttfts = [r.ttft for r in res.records if r.ttft is not None]
    assert v.ttft_queue_mean is not None and v.ttft_encoder_mean is not None
    assert v.ttft_prefill_mean is not None and v.ttft_prefill_mean > 0
    total = v.ttft_queue_mean + v.ttft_encoder_mean + v.ttft_prefill_mean
    assert total == pytest.approx(sum(ttfts) / len(ttfts))
    busy = sum(r.busy_seconds for r in res.replicas)
    assert sum(res.turn_encoder_seconds.values()) == pytest.approx(v.encoder_share * busy)


def test_a_lone_turn_waits_exactly_its_encoder_time_more_than_the_same_text() -> None:
    one = computer_use(sessions=1, steps=1)
    text = computer_use(sessions=1, steps=1, text_only=True)
    a, b = run(one, "1xH200:qwen2.5-vl-7b"), run(text, "1xH200:qwen2.5-vl-7b")
    enc = a.turn_encoder_seconds["s0", 0]
    cost = Simulator(one, SimConfig(parse_cluster("1xH200:qwen2.5-vl-7b"))).replicas[0].cost
    assert enc == pytest.approx(cost.encoder_time((SHOT,)))
    ra, rb = a.records[0], b.records[0]
    assert ra.ttft is not None and rb.ttft is not None
    assert ra.ttft - rb.ttft == pytest.approx(enc)
    # The lower bound counts the encoder too.
    assert a.lower_bounds["s0"] - b.lower_bounds["s0"] == pytest.approx(enc)


def test_the_sim_summary_shows_the_encoder_only_for_image_workloads() -> None:
    wl = computer_use()
    cluster = parse_cluster("2xH200:qwen2.5-vl-7b", block_size=BS)
    row = run_job(SimJob("hand-built", SimConfig(cluster, "round_robin")), wl)
    assert isinstance(row.vision, VisionStats)
    data = msgspec.to_builtins(row)
    # Round robin moves a session between replicas: a screenshot is encoded again on the
    # other one, unless its encoder cache still has it.
    assert data["vision"]["images_encoded"] > 15 and "encoder_share" in data["vision"]
    deadline = parse_deadline("1.5x")
    table = render_rows([row], deadline, "images")
    header = [c.header for c in table.columns]
    assert header[-4:] == ["img tok", "enc/GPU", "enc/TTFT", "enc hits"]

    text = generate(SyntheticConfig(sessions=3, steps_median=4, repo_tokens_median=3000, seed=1))
    plain = run_job(
        SimJob("synthetic", SimConfig(parse_cluster("2xH200:qwen2.5-vl-7b"), "round_robin")), text
    )
    assert plain.vision is msgspec.UNSET
    assert "vision" not in msgspec.to_builtins(plain)
    assert "vision" not in msgspec.json.decode(msgspec.json.encode(plain))
    assert [c.header for c in render_rows([plain], deadline, "t").columns][-1] == "errors"
    assert "enc/GPU" not in str(render_rows([plain], deadline, "t").caption)


def test_an_image_workload_needs_a_vision_model() -> None:
    with pytest.raises(UserError, match="no vision encoder"):
        run(computer_use(), "2xH200:llama-3.1-8b")


def test_an_image_larger_than_the_encoder_cache_is_an_error_record() -> None:
    wl = computer_use(sessions=1, steps=1)
    turn = wl.sessions[0].turns[0]
    big = Image(650, 20000, 6000, 4000, 3)
    b = ChainBuilder(BS)
    b.extend_segment(1, 650)
    b.extend_image(3, 20000)
    huge = dataclasses.replace(turn, input=b.chain(), images=(big,))
    wl = dataclasses.replace(wl, sessions=(dataclasses.replace(wl.sessions[0], turns=(huge,)),))
    res = run(wl)
    assert [r.error for r in res.records] == [
        "image too large: 20000 tokens exceed the encoder cache's 16384"
    ]
