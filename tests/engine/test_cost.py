"""Cost model: roofline sanity, closed-form decode runs, presets, calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvharness.engine.calibrate import Sample, calibrate
from kvharness.engine.cost import HARDWARE, MODELS, CostModel, Deployment, Efficiency, StepBatch


def model(name: str = "llama-3.3-70b", hw: str = "H200", **kw: object) -> CostModel:
    return CostModel(Deployment(HARDWARE[hw], MODELS[name], **kw))  # type: ignore[arg-type]


def test_decode_is_memory_bound_and_prefill_compute_bound() -> None:
    cm = model()
    eff = cm.deployment.efficiency
    one = cm.decode_step_time(1, 1000)
    weights = cm.deployment.weight_bytes / (HARDWARE["H200"].hbm_bandwidth * eff.memory)
    assert one == pytest.approx(weights + eff.step_overhead, rel=0.02)
    # Batching decodes is nearly free until compute or KV reads bite.
    assert cm.decode_step_time(32, 32 * 1000) < 1.5 * one
    big = cm.step_time(StepBatch(8192, 8192 * 4096.5, 8192, 0, 0))
    flops = 2 * MODELS["llama-3.3-70b"].params * 8192
    assert big > flops / HARDWARE["H200"].fp8_flops
    assert big == pytest.approx(flops / (HARDWARE["H200"].fp8_flops * eff.compute), rel=0.2)


def test_faster_hardware_and_tensor_parallel_are_faster() -> None:
    b = StepBatch(4096, 4096 * 2048.5, 4096, 8, 8000)
    assert model(hw="B200").step_time(b) < model(hw="H200").step_time(b)
    assert model(tp=4).step_time(b) < model(tp=2).step_time(b) < model(tp=1).step_time(b)
    assert model(tp=2).comm_time(100) > 0 and model().comm_time(100) == 0


def test_moe_reads_only_the_experts_it_touches() -> None:
    cm = model("moe-230b-a10b", tp=4)
    assert cm.weight_read_bytes(1) < 0.1 * cm.deployment.weight_bytes
    assert cm.weight_read_bytes(4096) == pytest.approx(cm.deployment.weight_bytes, rel=0.01)


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("seqs,ctx", [(1, 10), (64, 64 * 3000), (256, 256 * 20000), (3, 500)])
def test_decode_run_closed_form_matches_stepping(tp: int, seqs: int, ctx: int) -> None:
    cm = model(tp=tp)
    total = 0.0
    for k in range(1, 400):
        total += cm.decode_step_time(seqs, ctx + seqs * (k - 1))
        assert cm.decode_run_time(seqs, ctx, k) == pytest.approx(total, rel=1e-9)
    m = cm.decode_steps_until(seqs, ctx, total * 0.5, 399)
    assert cm.decode_run_time(seqs, ctx, m) >= total * 0.5 > cm.decode_run_time(seqs, ctx, m - 1)


def test_capacity_and_bad_configs() -> None:
    dep = Deployment(HARDWARE["H200"], MODELS["llama-3.3-70b"])
    per_token = 2 * 80 * 8 * 128 * 2
    assert dep.kv_bytes_per_token == per_token
    assert 150_000 < dep.kv_capacity_blocks * dep.block_size < 250_000
    with pytest.raises(ValueError, match="does not fit"):
        Deployment(HARDWARE["H100"], MODELS["llama-3.3-70b"], weight_dtype="bf16")
    with pytest.raises(ValueError, match="efficiency"):
        Efficiency(compute=1.5)


def test_calibration_recovers_known_factors() -> None:
    true = Efficiency(compute=0.42, memory=0.71, step_overhead=0.006)
    dep = Deployment(HARDWARE["H100"], MODELS["llama-3.1-8b"], efficiency=true)
    cm = CostModel(dep)
    rng = np.random.default_rng(1)
    samples = []
    for _ in range(60):
        if rng.random() < 0.5:
            n = int(rng.integers(256, 8192))
            b = StepBatch(n, n * (n + 1) / 2, n, 0, 0)
        else:
            s = int(rng.integers(1, 256))
            b = StepBatch(0, 0.0, 0, s, s * int(rng.integers(100, 4000)))
        samples.append(Sample.step(b, cm.step_time(b) * float(rng.normal(1, 0.01))))
    fit = calibrate(Deployment(HARDWARE["H100"], MODELS["llama-3.1-8b"]), samples)
    assert fit.efficiency.compute == pytest.approx(0.42, rel=0.05)
    assert fit.efficiency.memory == pytest.approx(0.71, rel=0.05)
    assert fit.efficiency.step_overhead == pytest.approx(0.006, abs=0.001)
    assert fit.rmse_rel < 0.05 and not math.isnan(fit.rmse_rel)
