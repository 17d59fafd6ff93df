"""engine: one serving replica as a pure model (no clock, no I/O; ``now`` is an argument).

Modules:

* :mod:`~kvharness.engine.block_pool` — paged KV blocks, prefix cache (hash -> block), ref counts,
  LRU free queue, KV events (vLLM v1's ``block_pool``).
* :mod:`~kvharness.engine.scheduler` — token budget, chunked prefill, decodes first, FIFO waiting
  queue, preemption by recompute (vLLM v1's scheduler).
* :mod:`~kvharness.engine.eviction` — LRU, session TTL pinning (Continuum), a CPU offload tier;
  eviction policies by name (``EVICTIONS``, ``make_eviction``).
* :mod:`~kvharness.engine.cost` — roofline step time; hardware and model presets.
* :mod:`~kvharness.engine.vision` — vision encoders (a ViT's parameters, FLOPs and bytes per
  image) and the per-replica encoder cache (vLLM v1's ``EncoderCacheManager``).
* :mod:`~kvharness.engine.cascade` — shared-prefix (cascade) decode attention: the KV tokens a
  decode batch reads when shared blocks are read once (``ATTENTIONS``, ``SharedBlocks``).
* :mod:`~kvharness.engine.calibrate` — least-squares fit of the cost model's efficiencies.
* :mod:`~kvharness.engine.replica` — pool + scheduler + cost model, stepped by a driver, with
  closed-form decode runs; its load counters for whoever routes to it.
* :mod:`~kvharness.engine.events` — the KV event types (shared with the gateway).
"""

from kvharness.engine.block_pool import BlockPool, NoFreeBlocks
from kvharness.engine.cascade import ATTENTIONS, SharedBlocks
from kvharness.engine.cost import (
    HARDWARE,
    MODELS,
    CostModel,
    Deployment,
    Efficiency,
    Hardware,
    ModelSpec,
    StepBatch,
)
from kvharness.engine.eviction import LRU, CpuTier, EvictionPolicy, SessionTTL, ToolTTL
from kvharness.engine.replica import Replica
from kvharness.engine.request import Request
from kvharness.engine.scheduler import Plan, Scheduler, SchedulerConfig
from kvharness.engine.vision import QWEN25_VL_VIT, EncoderCache, EncoderInput, VisionSpec

__all__ = [
    "ATTENTIONS",
    "HARDWARE",
    "LRU",
    "MODELS",
    "QWEN25_VL_VIT",
    "BlockPool",
    "CostModel",
    "CpuTier",
    "Deployment",
    "Efficiency",
    "EncoderCache",
    "EncoderInput",
    "EvictionPolicy",
    "Hardware",
    "ModelSpec",
    "NoFreeBlocks",
    "Plan",
    "Replica",
    "Request",
    "Scheduler",
    "SchedulerConfig",
    "SessionTTL",
    "SharedBlocks",
    "StepBatch",
    "ToolTTL",
    "VisionSpec",
]
