"""``session``: consistent hashing of the session id onto a hash ring of replicas."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from kvharness.routing.base import Decision, Policy, ReplicaState, RouteRequest
from kvharness.routing.policies._common import stable_hash

__all__ = ["SessionHash"]


class SessionHash(Policy):
    """Session affinity by consistent hashing, blind to load and cache contents.

    Each replica owns ``virtual_nodes`` points on a 64-bit ring (hashes of ``"<name>#<k>"``); a
    request goes to the owner of the first point at or after the hash of its key, skipping
    replicas not eligible, so removing a replica moves only its own keys. The key is the session id;
    without one, the hash of the prompt's first ``prefix_blocks`` blocks (requests sharing that
    prefix land together), and the request id for a prompt shorter than one block.
    """

    name = "session"

    def __init__(self, virtual_nodes: int = 160, prefix_blocks: int = 4) -> None:
        if virtual_nodes < 1 or prefix_blocks < 1:
            raise ValueError("virtual_nodes and prefix_blocks must be >= 1")
        self.virtual_nodes = virtual_nodes
        self.prefix_blocks = prefix_blocks
        self._names: tuple[str, ...] = ()
        self._points: list[int] = []
        self._owners: list[int] = []

    def _ring(self, replicas: Sequence[ReplicaState]) -> None:
        names = tuple(r.name for r in replicas)
        if names == self._names:
            return
        ring = sorted(
            (stable_hash(f"{name}#{k}"), i)
            for i, name in enumerate(names)
            for k in range(self.virtual_nodes)
        )
        self._names = names
        self._points = [p for p, _ in ring]
        self._owners = [i for _, i in ring]

    def key(self, request: RouteRequest) -> int:
        if request.session_id is not None:
            return stable_hash("session:" + request.session_id)
        if request.block_hashes:
            k = min(len(request.block_hashes), self.prefix_blocks)
            return stable_hash(request.block_hashes[k - 1] & ((1 << 64) - 1))
        return stable_hash("request:" + request.request_id)

    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        ok = set(eligible)
        self._ring(replicas)
        start = bisect.bisect_left(self._points, self.key(request))
        n = len(self._points)
        for k in range(n):
            owner = self._owners[(start + k) % n]
            if owner in ok:
                return Decision(owner, "affinity" if k == 0 else "failover")
        raise AssertionError("eligible is never empty")  # pragma: no cover
