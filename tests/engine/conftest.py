"""Factories for engine-model tests: a small deployment, a pool-backed scheduler, requests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvharness.engine.block_pool import BlockPool
from kvharness.engine.cost import HARDWARE, MODELS, Deployment
from kvharness.engine.eviction import EvictionPolicy, make_eviction
from kvharness.engine.request import Request
from kvharness.engine.scheduler import Scheduler, SchedulerConfig


def deployment(block_size: int = 4) -> Deployment:
    return Deployment(HARDWARE["H100"], MODELS["llama-3.1-8b"], block_size=block_size)


def scheduler(
    blocks: int,
    *,
    budget: int = 8,
    seqs: int = 16,
    block_size: int = 4,
    eviction: EvictionPolicy | None = None,
) -> Scheduler:
    return Scheduler(
        BlockPool(blocks, block_size, events=True),
        SchedulerConfig(budget, seqs),
        eviction or make_eviction("lru"),
    )


def request(
    name: str,
    prompt: int,
    output: int,
    hashes: tuple[int, ...] = (),
    *,
    session: str | None = None,
    last: bool = True,
    tool: str | None = None,
) -> Request:
    return Request(
        name, hashes, prompt, output, 0.0, session=session, last_turn=last, next_tool=tool
    )


@pytest.fixture
def make_scheduler() -> Callable[..., Scheduler]:
    return scheduler


@pytest.fixture
def make_request() -> Callable[..., Request]:
    return request


@pytest.fixture
def make_deployment() -> Callable[..., Any]:
    return deployment
