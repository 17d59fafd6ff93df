"""Step-time cost model: a roofline over hardware and model specs, with calibrated efficiencies.

One engine step runs a batch of prefill chunks and decode sequences. Its duration (seconds) is::

    overhead + max(FLOPs / (peak * compute_eff), bytes / (hbm_bw * memory_eff)) + tp_comm

per GPU of a tensor-parallel group (FLOPs and bytes split ``tp`` ways). FLOPs are the dense matmuls
(2 x active parameters per token) plus attention (4 x heads x head_dim per query-key pair per layer).
Bytes are the weights read once per step (for a MoE, the experts the batch touches), the KV cache
read by attention and the KV written. ``tp_comm`` is two all-reduces per layer over the GPU link.

Presets: hardware ``H100``, ``H200``, ``B200``; models ``llama-3.1-8b``, ``llama-3.3-70b``,
``qwen3-32b``, ``moe-230b-a10b`` (230B total / 10B active, shaped like MiniMax-M2) and the
vision-language ``qwen2.5-vl-7b`` and ``qwen2.5-vl-72b``. Efficiency factors are fitted by
:func:`kvharness.engine.calibrate.calibrate` from measured times.

**Images.** A model with a vision encoder (:attr:`ModelSpec.vision`, a
:class:`~kvharness.engine.vision.VisionSpec`) encodes the images a step's prefill chunks reach
(:attr:`StepBatch.encoder_images`) in the same step, before the language model runs. The step
takes :meth:`CostModel.encoder_time` longer: the same roofline, ``max(encoder FLOPs / (bf16 peak
* compute_eff), (encoder weights + activations) / (hbm_bw * memory_eff))`` split ``tp`` ways
(vLLM shards the encoder's weights like the language model's by default), plus two all-reduces
per encoder layer when ``tp > 1``. A step with no image costs exactly what it did without them.

**Decode KV reads.** Attention FLOPs are per query-key pair, always. The bytes decode attention reads
are ``decode_kv_read`` tokens of KV when the batch gives it, else ``decode_ctx`` (a paged kernel:
every sequence reads its whole context, shared prefix blocks included). A shared-prefix (cascade)
kernel reads a block that several sequences share once per step; :mod:`kvharness.engine.cascade`
works that count out.

For a decode-only batch whose membership does not change, step ``j``'s KV read grows linearly with
``j`` (``seqs`` new tokens a step, one per sequence, under either kernel), so the time of ``k`` steps
has a closed form (:meth:`CostModel.decode_run_time`) and so does the number of steps that fit
before a given time (:meth:`CostModel.decode_steps_until`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple, Protocol

from msgspec import UNSET, UnsetType

from kvharness.engine.vision import QWEN25_VL_VIT, VisionSpec

if TYPE_CHECKING:
    from kvharness.engine.profile import EngineProfile

__all__ = [
    "HARDWARE",
    "MODELS",
    "CostModel",
    "Deployment",
    "Efficiency",
    "Hardware",
    "ModelSpec",
    "StepBatch",
    "StepCost",
    "steps_until",
]

_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}
_MIB = 2**20


@dataclass(frozen=True, slots=True)
class Hardware:
    """One GPU. FLOP/s are dense (no sparsity); bandwidths in bytes/s; memory in bytes."""

    name: str
    bf16_flops: float
    fp8_flops: float
    hbm_bandwidth: float
    hbm_bytes: float
    link_bandwidth: float
    """GPU-to-GPU (NVLink) bandwidth per direction, bytes/s, for tensor-parallel all-reduces."""
    pcie_bandwidth: float = 55e9
    """Host link bandwidth, bytes/s (KV offload to CPU memory)."""

    def peak_flops(self, dtype: str) -> float:
        return self.fp8_flops if dtype in ("fp8", "fp4") else self.bf16_flops


HARDWARE: dict[str, Hardware] = {
    # NVIDIA datasheets (SXM parts); memory as nvidia-smi reports it.
    "H100": Hardware("H100", 989.4e12, 1978.9e12, 3.35e12, 81_559 * _MIB, 450e9),
    "H200": Hardware("H200", 989.4e12, 1978.9e12, 4.8e12, 143_771 * _MIB, 450e9),
    "B200": Hardware("B200", 2.25e15, 4.5e15, 8.0e12, 183_359 * _MIB, 900e9),
}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer. ``experts`` / ``experts_per_token`` are 0 for dense models.
    ``params`` are the language model's; ``vision`` is the image encoder of a vision-language
    model (unset for a text-only one, and then absent from the spec's JSON)."""

    name: str
    params: float
    active_params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int = 0
    experts_per_token: int = 0
    vision: VisionSpec | UnsetType = UNSET

    @property
    def encoder(self) -> VisionSpec | None:
        """The vision encoder, or None for a text-only model."""
        return None if isinstance(self.vision, UnsetType) else self.vision

    def __post_init__(self) -> None:
        if not 0 < self.active_params <= self.params:
            raise ValueError(f"{self.name}: need 0 < active_params <= params")
        if self.experts and not 0 < self.experts_per_token < self.experts:
            raise ValueError(f"{self.name}: need 0 < experts_per_token < experts")

    def kv_bytes_per_token(self, kv_dtype: str) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * _DTYPE_BYTES[kv_dtype]

    def weight_params_touched(self, tokens: int) -> float:
        """Parameters a step over ``tokens`` tokens reads: all of a dense model; for a MoE the
        always-active part plus the experts hit at least once (uniform routing assumed)."""
        if not self.experts:
            return self.params
        per_expert = (self.params - self.active_params) / (self.experts - self.experts_per_token)
        always = self.active_params - self.experts_per_token * per_expert
        miss = (1.0 - self.experts_per_token / self.experts) ** max(tokens, 1)
        return always + self.experts * per_expert * (1.0 - miss)


_QWEN25_VL_72B_VIT = replace(QWEN25_VL_VIT, out_hidden=8192)

MODELS: dict[str, ModelSpec] = {
    # Shapes from the models' published configs.
    "llama-3.1-8b": ModelSpec("llama-3.1-8b", 8.03e9, 8.03e9, 32, 4096, 32, 8, 128),
    "llama-3.3-70b": ModelSpec("llama-3.3-70b", 70.6e9, 70.6e9, 80, 8192, 64, 8, 128),
    "qwen3-32b": ModelSpec("qwen3-32b", 32.8e9, 32.8e9, 64, 5120, 64, 8, 128),
    "moe-230b-a10b": ModelSpec("moe-230b-a10b", 230e9, 10e9, 62, 3072, 48, 8, 128, 256, 8),
    # Qwen2.5-VL: the language model is Qwen2.5-7B / -72B's (28 layers, hidden 3584, 28 heads,
    # 4 KV heads; 80 layers, hidden 8192, 64 heads, 8 KV heads; untied 152,064-token
    # embeddings), parameters counted from those shapes; the vision encoder is the one ViT of
    # the family with the merger's output at the language model's width.
    "qwen2.5-vl-7b": ModelSpec(
        "qwen2.5-vl-7b", 7.62e9, 7.62e9, 28, 3584, 28, 4, 128, vision=QWEN25_VL_VIT
    ),
    "qwen2.5-vl-72b": ModelSpec(
        "qwen2.5-vl-72b", 72.7e9, 72.7e9, 80, 8192, 64, 8, 128, vision=_QWEN25_VL_72B_VIT
    ),
}


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fractions of peak achieved, and fixed costs (seconds). Fitted by calibration."""

    compute: float = 0.55
    """Achieved / peak dense FLOP/s."""
    memory: float = 0.8
    """Achieved / peak HBM bandwidth."""
    link: float = 0.7
    """Achieved / peak GPU-link bandwidth."""
    step_overhead: float = 0.003
    """Per engine step: scheduling, kernel launches, sampling (s)."""
    allreduce_latency: float = 8e-6
    """Fixed latency of one tensor-parallel all-reduce (s)."""

    def __post_init__(self) -> None:
        for name in ("compute", "memory", "link"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ValueError(f"efficiency {name} must be in (0, 1], got {v}")
        if self.step_overhead < 0 or self.allreduce_latency < 0:
            raise ValueError("overheads must be >= 0")


@dataclass(frozen=True, slots=True)
class Deployment:
    """One replica: a model on ``tp`` GPUs of one kind, with dtypes and memory settings."""

    hardware: Hardware
    model: ModelSpec
    tp: int = 1
    weight_dtype: str = "fp8"
    kv_dtype: str = "bf16"
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    efficiency: Efficiency = field(default_factory=Efficiency)
    profile: EngineProfile | None = None
    """A measured engine (:mod:`kvharness.engine.profile`): when set, its step times and KV
    capacity replace the roofline's and the hardware's."""

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError("tp must be >= 1")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1 token, got {self.block_size}")
        for d in (self.weight_dtype, self.kv_dtype):
            if d not in _DTYPE_BYTES:
                raise ValueError(f"unknown dtype {d!r}; choose from {', '.join(_DTYPE_BYTES)}")
        if self.kv_capacity_blocks < 1:
            raise ValueError(
                f"{self.model.name} does not fit on {self.tp}x{self.hardware.name} in "
                f"{self.weight_dtype}: raise tp or use a smaller weight dtype"
            )

    @property
    def weight_bytes(self) -> float:
        """Weights held in memory: the language model's in ``weight_dtype``, a vision
        encoder's in bf16."""
        text = self.model.params * _DTYPE_BYTES[self.weight_dtype]
        enc = self.model.encoder
        return text if enc is None else text + enc.params * _DTYPE_BYTES["bf16"]

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token(self.kv_dtype)

    @property
    def block_bytes(self) -> float:
        return self.kv_bytes_per_token * self.block_size

    @property
    def kv_capacity_blocks(self) -> int:
        """KV blocks that fit beside the weights (activations ignored), over the whole TP group;
        a measured profile's own count."""
        if self.profile is not None:
            return self.profile.num_blocks
        free = self.tp * self.hardware.hbm_bytes * self.gpu_memory_utilization - self.weight_bytes
        return max(0, int(free // self.block_bytes))

    def with_efficiency(self, eff: Efficiency) -> Deployment:
        return replace(self, efficiency=eff)


class StepBatch(NamedTuple):
    """What a step computes. Token counts; ``*_pairs`` are query-key pairs (attention work)."""

    prefill_tokens: int = 0
    prefill_pairs: float = 0.0
    """Sum over prefill chunks of n * (context before + (n + 1) / 2)."""
    prefill_kv_read: int = 0
    """Tokens of KV read by prefill chunks (their context before the chunk plus the chunk)."""
    decode_seqs: int = 0
    decode_ctx: int = 0
    """Sum over decode sequences of the tokens they attend to (context + the new one)."""
    decode_kv_read: int | None = None
    """Tokens of KV decode attention reads from memory; None: ``decode_ctx`` (each sequence reads
    its own context). Less under a shared-prefix kernel; attention FLOPs still use ``decode_ctx``."""
    encoder_images: tuple[int, ...] = ()
    """Placeholder tokens of each image the vision encoder computes in this step."""

    @property
    def decode_kv(self) -> int:
        """Tokens of KV decode attention reads (``decode_kv_read``, defaulting to ``decode_ctx``)."""
        return self.decode_ctx if self.decode_kv_read is None else self.decode_kv_read


class StepCost(Protocol):
    """What the engine model asks of a cost model: the roofline's :class:`CostModel`, or a
    measured engine's :class:`~kvharness.engine.profile.ProfileCostModel`."""

    def step_time(self, b: StepBatch) -> float: ...

    def decode_run_time(self, seqs: int, ctx0: int, k: int, kv0: int | None = None) -> float: ...

    def decode_steps_until(
        self, seqs: int, ctx0: int, budget: float, k_max: int, kv0: int | None = None
    ) -> int: ...

    def kv_read_seconds(self, tokens: float) -> float: ...

    def encoder_time(self, images: Sequence[int]) -> float: ...

    def encoder_flops(self, tokens: int) -> float: ...


class CostModel:
    """Turns a :class:`StepBatch` into seconds for one :class:`Deployment`. Pure and cheap."""

    __slots__ = (
        "_attn",
        "_cbw",
        "_dep",
        "_ecbw",
        "_enc",
        "_flop_tok",
        "_kvb",
        "_mbw",
        "_overhead",
        "_tp",
    )

    def __init__(self, dep: Deployment) -> None:
        self._dep = dep
        eff, hw, m = dep.efficiency, dep.hardware, dep.model
        self._tp = dep.tp
        # Seconds per FLOP and per byte on one GPU of the group (work split tp ways).
        self._cbw = 1.0 / (hw.peak_flops(dep.weight_dtype) * eff.compute * dep.tp)
        self._mbw = 1.0 / (hw.hbm_bandwidth * eff.memory * dep.tp)
        self._flop_tok = 2.0 * m.active_params
        self._attn = 4.0 * m.layers * m.heads * m.head_dim
        self._kvb = dep.kv_bytes_per_token
        self._overhead = eff.step_overhead
        self._enc = m.encoder
        # The vision encoder runs in bf16 whatever the language model's weights are.
        self._ecbw = 1.0 / (hw.bf16_flops * eff.compute * dep.tp)

    @property
    def deployment(self) -> Deployment:
        return self._dep

    def comm_time(self, tokens: int) -> float:
        """Tensor-parallel all-reduces of a step over ``tokens`` tokens (0 when tp == 1)."""
        tp = self._tp
        if tp == 1 or tokens == 0:
            return 0.0
        dep = self._dep
        eff = dep.efficiency
        size = tokens * dep.model.hidden * 2.0  # bf16 activations
        per = 2.0 * (tp - 1) / tp * size / (dep.hardware.link_bandwidth * eff.link)
        return 2 * dep.model.layers * (per + eff.allreduce_latency)

    def weight_read_bytes(self, tokens: int) -> float:
        dep = self._dep
        m = dep.model
        if not m.experts:
            return dep.weight_bytes
        return m.weight_params_touched(tokens) * _DTYPE_BYTES[dep.weight_dtype]

    def step_time(self, b: StepBatch) -> float:
        """Seconds for one engine step over batch ``b`` (0 for an empty batch)."""
        tokens = b.prefill_tokens + b.decode_seqs
        if tokens == 0:
            return 0.0
        kv = b.decode_ctx if b.decode_kv_read is None else b.decode_kv_read
        flops = self._flop_tok * tokens + self._attn * (b.prefill_pairs + b.decode_ctx)
        nbytes = self.weight_read_bytes(tokens) + self._kvb * (b.prefill_kv_read + kv + tokens)
        t = (
            self._overhead
            + max(flops * self._cbw, nbytes * self._mbw)
            + (self.comm_time(tokens) if self._tp > 1 else 0.0)
        )
        if b.encoder_images:
            t += self.encoder_time(b.encoder_images)
        return t

    def _vision(self) -> VisionSpec:
        enc = self._enc
        if enc is None:
            raise ValueError(f"{self._dep.model.name} has no vision encoder")
        return enc

    def encoder_flops(self, tokens: int) -> float:
        """FLOPs to encode one image of ``tokens`` placeholder tokens (whole group, not per GPU)."""
        enc = self._vision()
        return enc.flops(enc.patches(tokens))

    def encoder_time(self, images: Sequence[int]) -> float:
        """Seconds the vision encoder adds to a step that encodes ``images`` (placeholder tokens
        of each): weights read once, each image's FLOPs and activations, the TP all-reduces.
        O(images). Raises ValueError for a model without a vision encoder."""
        if not images:
            return 0.0
        enc = self._vision()
        flops = acts = 0.0
        patches = 0
        for t in images:
            p = enc.patches(t)
            patches += p
            flops += enc.flops(p)
            acts += enc.activation_values(p)
        bf16 = _DTYPE_BYTES["bf16"]
        nbytes = enc.params * bf16 + acts * bf16
        return max(flops * self._ecbw, nbytes * self._mbw) + self._encoder_comm(enc, patches)

    def encoder_comm_time(self, images: Sequence[int]) -> float:
        """The tensor-parallel all-reduces' part of :meth:`encoder_time` (0 when tp == 1)."""
        enc = self._vision()
        return self._encoder_comm(enc, sum(enc.patches(t) for t in images))

    def _encoder_comm(self, enc: VisionSpec, patches: int) -> float:
        tp = self._tp
        if tp == 1 or patches == 0:
            return 0.0
        eff = self._dep.efficiency
        size = patches * enc.hidden * _DTYPE_BYTES["bf16"]
        per = 2.0 * (tp - 1) / tp * size / (self._dep.hardware.link_bandwidth * eff.link)
        return 2 * enc.layers * (per + eff.allreduce_latency)

    def terms(self, b: StepBatch) -> tuple[float, float, float]:
        """(FLOPs at peak, bytes at peak HBM bandwidth, TP communication), seconds per GPU, with
        compute and memory efficiency 1: what calibration fits factors to."""
        tokens = b.prefill_tokens + b.decode_seqs
        if tokens == 0:
            return 0.0, 0.0, 0.0
        eff = self._dep.efficiency
        kv = b.decode_ctx if b.decode_kv_read is None else b.decode_kv_read
        flops = self._flop_tok * tokens + self._attn * (b.prefill_pairs + b.decode_ctx)
        nbytes = self.weight_read_bytes(tokens) + self._kvb * (b.prefill_kv_read + kv + tokens)
        return (
            flops * self._cbw * eff.compute,
            nbytes * self._mbw * eff.memory,
            self.comm_time(tokens),
        )

    def kv_read_seconds(self, tokens: float) -> float:
        """Seconds to read ``tokens`` tokens of KV at the achieved HBM bandwidth (per GPU)."""
        return self._kvb * tokens * self._mbw

    def decode_attention_time(self, seqs: int, ctx: int, kv_read: int | None = None) -> float:
        """The attention part of a decode step alone, as a kernel benchmark times it:
        ``max(pair FLOPs, KV bytes read)`` at the fitted efficiencies, no weights, no overhead."""
        kv = ctx if kv_read is None else kv_read
        return max(self._attn * ctx * self._cbw, self._kvb * (kv + seqs) * self._mbw)

    # -- decode runs: ``seqs`` sequences, attending to ``ctx0`` tokens in all at step 0, ``seqs``
    # more at each later step; ``kv0`` tokens of KV read at step 0 (None: ``ctx0``), ``seqs`` more
    # at each later step (the new tokens are each sequence's own) ---------------------------------

    def _decode_lines(
        self, seqs: int, ctx0: int, kv0: int | None = None
    ) -> tuple[float, float, float, float, float]:
        """Step j takes ``c + max(a0 + a1 j, b0 + b1 j)``; returns (c, a0, a1, b0, b1)."""
        kv = ctx0 if kv0 is None else kv0
        a0 = (self._flop_tok * seqs + self._attn * ctx0) * self._cbw
        a1 = self._attn * seqs * self._cbw
        b0 = (self.weight_read_bytes(seqs) + self._kvb * (kv + seqs)) * self._mbw
        b1 = self._kvb * seqs * self._mbw
        c = self._overhead + (self.comm_time(seqs) if self._tp > 1 else 0.0)
        return c, a0, a1, b0, b1

    def decode_step_time(self, seqs: int, ctx: int, kv_read: int | None = None) -> float:
        return self.step_time(StepBatch(decode_seqs=seqs, decode_ctx=ctx, decode_kv_read=kv_read))

    def decode_run_time(self, seqs: int, ctx0: int, k: int, kv0: int | None = None) -> float:
        """Seconds for ``k`` consecutive decode steps (closed form, O(1))."""
        if k <= 0 or seqs == 0:
            return 0.0
        c, a0, a1, b0, b1 = self._decode_lines(seqs, ctx0, kv0)
        # Steps j < x are bound by the line that is larger at j = 0; from x on by the other.
        if a0 >= b0:
            first, f1, second, s1 = a0, a1, b0, b1
        else:
            first, f1, second, s1 = b0, b1, a0, a1
        if s1 > f1:
            x = max(0, math.ceil((first - second) / (s1 - f1)))
            x = min(x, k)
        else:
            x = k
        total = c * k + _line_sum(first, f1, 0, x) + _line_sum(second, s1, x, k)
        return total

    def decode_steps_until(
        self, seqs: int, ctx0: int, budget: float, k_max: int, kv0: int | None = None
    ) -> int:
        """Smallest ``m`` in ``[1, k_max]`` with ``decode_run_time(m) >= budget`` (k_max if none)."""
        return steps_until(lambda m: self.decode_run_time(seqs, ctx0, m, kv0), budget, k_max)


def steps_until(run_time: Callable[[int], float], budget: float, k_max: int) -> int:
    """Smallest ``m`` in ``[1, k_max]`` with ``run_time(m) >= budget`` (``k_max`` if none), for a
    ``run_time`` that grows with ``m``: O(log k_max) calls."""
    lo, hi = 1, k_max
    while lo < hi:
        mid = (lo + hi) // 2
        if run_time(mid) >= budget:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _line_sum(v0: float, slope: float, start: int, end: int) -> float:
    """Sum of ``v0 + slope * j`` for ``j`` in ``[start, end)``."""
    n = end - start
    if n <= 0:
        return 0.0
    return n * v0 + slope * (start + end - 1) * n / 2.0
