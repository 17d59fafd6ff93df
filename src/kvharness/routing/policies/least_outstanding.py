"""``least_outstanding``: the replica with the fewest requests in flight."""

from __future__ import annotations

from collections.abc import Sequence

from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest

__all__ = ["LeastOutstanding"]


class LeastOutstanding(Policy):
    """Fewest running + waiting requests (:attr:`ReplicaState.outstanding`). Ties go to the first
    tied replica after the previous pick, so equal loads spread instead of piling on replica 0."""

    name = "least_outstanding"

    def __init__(self) -> None:
        self._last = -1

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        n = len(replicas)
        order = sorted(eligible, key=lambda i: (i - self._last - 1) % n)
        best = min(order, key=lambda i: replicas[i].outstanding)
        self._last = best
        return Decision(best, "least_load")
