"""Factories for routing tests: cluster states and requests built by hand."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from kvharness.routing.base import ReplicaState, RouteRequest


def _cluster(
    n: int, capacity_blocks: int = 1000, block_size: int = 16, **fields: int
) -> list[ReplicaState]:
    """``n`` idle healthy replicas named r0..r{n-1}; ``fields`` set on all of them."""
    return [
        ReplicaState(f"r{i}", capacity_blocks=capacity_blocks, block_size=block_size, **fields)
        for i in range(n)
    ]


def _request(
    blocks: Sequence[int],
    session: str | None = None,
    rid: str = "q",
    block_size: int = 16,
    tail: int = 0,
    out: int = 64,
) -> RouteRequest:
    """A request whose full blocks are ``blocks`` (plus ``tail`` tokens of a partial block)."""
    return RouteRequest(
        request_id=rid,
        session_id=session,
        block_hashes=tuple(blocks),
        prompt_tokens=len(blocks) * block_size + tail,
        max_output_tokens=out,
    )


@pytest.fixture
def cluster() -> Callable[..., list[ReplicaState]]:
    return _cluster


@pytest.fixture
def req() -> Callable[..., RouteRequest]:
    return _request
