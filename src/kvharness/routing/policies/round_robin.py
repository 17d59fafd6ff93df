"""``round_robin``: each request to the next healthy replica in turn."""

from __future__ import annotations

from collections.abc import Sequence

from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest
from kvharness.routing.policies._common import candidates

__all__ = ["RoundRobin"]


class RoundRobin(Policy):
    """Cycles over replicas by index, skipping unhealthy ones. Ignores load and cache contents."""

    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        healthy = set(candidates(replicas))
        n = len(replicas)
        for k in range(n):
            i = (self._next + k) % n
            if i in healthy:
                self._next = i + 1
                return Decision(i, "rotation")
        raise AssertionError("candidates() is never empty")  # pragma: no cover
