"""Helpers shared by the built-in policies (not part of the public surface)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from kvharness.routing.base import ReplicaState

__all__ = ["candidates", "stable_hash"]


def candidates(replicas: Sequence[ReplicaState]) -> list[int]:
    """Indices of the healthy replicas; all of them when none is healthy (the caller then gets a
    decision anyway and the request fails there, visibly, rather than the router raising)."""
    if not replicas:
        raise ValueError("no replicas to route to")
    healthy = [i for i, r in enumerate(replicas) if r.healthy]
    return healthy or list(range(len(replicas)))


def stable_hash(key: str | int) -> int:
    """A 64-bit hash that is the same in every process (unlike ``hash()`` of a str)."""
    data = key.to_bytes(8, "little", signed=False) if isinstance(key, int) else key.encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
