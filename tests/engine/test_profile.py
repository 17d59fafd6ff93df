"""A measured engine's profile: its step times in closed form, its file, its place in a cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvharness.engine.cost import StepBatch
from kvharness.engine.profile import EngineProfile, ProfileCostModel
from kvharness.engine.replica import Replica
from kvharness.errors import FormatError
from kvharness.sim.cluster import parse_cluster

PROFILE = EngineProfile(
    "tiny",
    block_size=16,
    num_blocks=500,
    max_num_batched_tokens=256,
    max_num_seqs=8,
    step_overhead_s=0.004,
    prefill_token_s=2e-5,
    decode_seq_s=0.001,
    pair_s=1e-8,
    request_latency_s=0.003,
)


def test_a_step_is_the_sum_of_its_terms() -> None:
    cost = ProfileCostModel(PROFILE)
    b = StepBatch(prefill_tokens=100, prefill_pairs=5000.0, decode_seqs=3, decode_ctx=900)
    assert cost.step_time(b) == pytest.approx(0.004 + 100 * 2e-5 + 3 * 0.001 + 5900 * 1e-8)
    assert cost.step_time(StepBatch()) == 0.0


def test_a_decode_run_is_the_sum_of_its_steps_and_inverts() -> None:
    cost = ProfileCostModel(PROFILE)
    seqs, ctx, k = 3, 1000, 17
    steps = sum(cost.decode_step_time(seqs, ctx + j * seqs) for j in range(k))
    assert cost.decode_run_time(seqs, ctx, k) == pytest.approx(steps)
    budget = cost.decode_run_time(seqs, ctx, 9)
    assert cost.decode_steps_until(seqs, ctx, budget, 100) == 9
    assert cost.decode_steps_until(seqs, ctx, 1e9, 40) == 40


def test_the_file_round_trips_and_a_bad_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "engine.json"
    PROFILE.save(path)
    assert EngineProfile.load(path) == PROFILE
    doc = json.loads(path.read_text())
    doc["surprise"] = 1
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="unknown fields surprise"):
        EngineProfile.load(path)
    path.write_text(json.dumps({**PROFILE.to_json(), "decode_seq_s": -1}))
    with pytest.raises(FormatError, match="decode_seq_s must be >= 0"):
        EngineProfile.load(path)
    with pytest.raises(FormatError, match="no such engine profile"):
        EngineProfile.load(tmp_path / "none.json")


def test_a_cluster_of_a_profile_uses_its_costs_and_capacity(tmp_path: Path) -> None:
    path = tmp_path / "engine.json"
    PROFILE.save(path)
    cluster = parse_cluster(f"3xprofile:{path}", block_size=128)
    assert cluster.replicas == 3 and cluster.label() == "3xprofile:tiny"
    assert cluster.with_block_size(64) == cluster  # the engine's own block size stays
    rep = Replica("r0", cluster.deployment)
    assert rep.pool.num_blocks == 500 and rep.pool.block_size == 16
    assert isinstance(rep.cost, ProfileCostModel)
