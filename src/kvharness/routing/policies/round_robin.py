"""``round_robin``: each request to the next eligible replica in turn."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest

__all__ = ["RoundRobin"]


class RoundRobin(Policy):
    """Cycles over replicas by index, skipping those not eligible. Ignores load and cache
    contents."""

    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        # The first eligible index at or after the next in turn, else the first: eligible is
        # ascending.
        k = bisect.bisect_left(eligible, self._next)
        i = eligible[k] if k < len(eligible) else eligible[0]
        self._next = i + 1
        return Decision(i, "rotation")
