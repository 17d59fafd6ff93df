"""Cluster specs: ``16xH200:llama-3.3-70b[:tp2][:bf16][:kv-fp8]`` or a measured engine,
``2xprofile:runs/cal/engine.json`` -> a :class:`ClusterSpec`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kvharness.engine.cost import HARDWARE, MODELS, Deployment
from kvharness.errors import UserError

__all__ = ["ClusterSpec", "parse_cluster"]


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """``replicas`` identical replicas, each one :class:`Deployment` (``tp`` GPUs)."""

    replicas: int
    deployment: Deployment

    def label(self) -> str:
        d = self.deployment
        if d.profile is not None:
            return f"{self.replicas}xprofile:{d.profile.name}"
        tp = f":tp{d.tp}" if d.tp > 1 else ""
        return f"{self.replicas}x{d.hardware.name}:{d.model.name}{tp}:{d.weight_dtype}"

    def with_block_size(self, block_size: int) -> ClusterSpec:
        """The cluster with engines of ``block_size`` tokens; a measured profile keeps its
        engine's own (its KV capacity was counted in those blocks)."""
        if self.deployment.profile is not None:
            return self
        return replace(self, deployment=replace(self.deployment, block_size=block_size))


def parse_cluster(spec: str, *, block_size: int = 16) -> ClusterSpec:
    """Parse ``NxHW:MODEL[:tpK][:WEIGHT_DTYPE][:kv-KV_DTYPE]``.

    Weights default to fp8 and the KV cache to bf16 (vLLM with an FP8 checkpoint); ``tp`` defaults
    to the smallest power of two on which the weights take at most half the GPU memory.
    """
    head, _, rest = spec.partition(":")
    count, x, hw_name = head.partition("x")
    if not x or not count.isdigit() or int(count) < 1:
        raise UserError(
            f"bad cluster {spec!r}: expected NxHARDWARE:MODEL, e.g. 16xH200:llama-3.3-70b, or "
            "NxPROFILE:PATH"
        )
    if hw_name.lower() == "profile":
        if not rest:
            raise UserError(f"bad cluster {spec!r}: name the engine profile, NxPROFILE:PATH")
        from kvharness.engine.profile import EngineProfile

        return ClusterSpec(int(count), EngineProfile.load(Path(rest)).deployment())
    hw = HARDWARE.get(hw_name.upper())
    if hw is None:
        raise UserError(f"unknown hardware {hw_name!r}; choose from {', '.join(HARDWARE)}")
    parts = [p for p in rest.split(":") if p]
    if not parts:
        raise UserError(f"bad cluster {spec!r}: name a model, one of {', '.join(MODELS)}")
    model = MODELS.get(parts[0].lower())
    if model is None:
        raise UserError(f"unknown model {parts[0]!r}; choose from {', '.join(MODELS)}")
    tp: int | None = None
    weight, kv = "fp8", "bf16"
    for p in parts[1:]:
        p = p.lower()
        if p.startswith("tp") and p[2:].isdigit() and int(p[2:]) >= 1:
            tp = int(p[2:])
        elif p.startswith("kv-"):
            kv = p[3:]
        elif p in ("fp8", "bf16", "fp16", "fp4"):
            weight = p
        else:
            raise UserError(f"bad cluster option {p!r} in {spec!r}: use tpN, a dtype, or kv-DTYPE")
    if tp is None:
        tp = 1
        bytes_per = {"fp8": 1.0, "fp4": 0.5}.get(weight, 2.0)
        while model.params * bytes_per > 0.5 * tp * hw.hbm_bytes and tp < 64:
            tp *= 2
    try:
        dep = Deployment(hw, model, tp, weight, kv, block_size=block_size)
    except ValueError as err:
        raise UserError(str(err)) from None
    return ClusterSpec(int(count), dep)
