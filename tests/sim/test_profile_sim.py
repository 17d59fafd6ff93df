"""The simulator on a measured profile: its scheduler limits and its request latency."""

from __future__ import annotations

import pytest

from kvharness.engine.cost import StepBatch
from kvharness.engine.profile import EngineProfile, ProfileCostModel
from kvharness.sim.cluster import ClusterSpec
from kvharness.sim.simulator import SimConfig, Simulator
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.model import Arrival, Session, Turn, Workload

PROFILE = EngineProfile(
    "tiny", block_size=16, num_blocks=500, max_num_batched_tokens=64, max_num_seqs=8,
    step_overhead_s=0.004, prefill_token_s=1e-4, decode_seq_s=0.002, pair_s=0.0,
    request_latency_s=0.05,
)  # fmt: skip


def _turn(tokens: int, output: int, seed: int) -> Turn:
    b = ChainBuilder(16)
    b.extend_tokens([seed * 1000 + i for i in range(tokens)])
    return Turn(b.chain(), output)


def test_one_turn_takes_the_latency_then_its_chunked_prefill_then_decode() -> None:
    wl = Workload((Session("s", (_turn(100, 5, 1),), start=0.0),), 16, arrival=Arrival("trace"))
    result = Simulator(wl, SimConfig(ClusterSpec(1, PROFILE.deployment()))).run()
    (rec,) = result.records
    cost = ProfileCostModel(PROFILE)
    # 100 tokens in chunks of the profile's 64-token budget: 64, then 36.
    prefill = cost.step_time(StepBatch(64, 0.0, 64)) + cost.step_time(StepBatch(36, 0.0, 100))
    assert rec.sent == 0.0
    assert rec.first_token == pytest.approx(0.05 + prefill)
    assert rec.done == pytest.approx(0.05 + prefill + 4 * (0.004 + 0.002))
    assert rec.scheduled == pytest.approx(0.05)  # the engine's queue starts on admission
