"""The routing interface shared by the simulator and the live gateway.

A :class:`Policy` sees one request and a view of the cluster and picks a replica. It takes no
simulator or HTTP types, reads no clock (``now`` is passed in) and does no I/O, so the object that
wins in the simulator is the very one that routes live traffic.

The cluster view is a sequence of :class:`ReplicaState` (kept current by whoever owns the replicas:
the simulator from its engine models' counters, the gateway's router from its own bookkeeping),
per replica the number of leading blocks of the request already cached there (from the prefix
index, fed by KV events or by the router's own decisions), and the replicas the request may go to.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

__all__ = ["Decision", "Policy", "ReplicaState", "RouteRequest"]


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What a policy knows of a request.

    ``block_hashes`` are the chained hashes of the prompt's *full* blocks at the engines' block
    size. ``session_id`` is the agent session when known (a header live; the workload in the sim).
    """

    request_id: str
    session_id: str | None
    block_hashes: tuple[int, ...]
    prompt_tokens: int
    max_output_tokens: int


@dataclass(slots=True)
class ReplicaState:
    """One replica as a policy sees it; mutable, updated in place by the owner of the replicas."""

    name: str
    capacity_blocks: int
    block_size: int
    running: int = 0
    """Requests being served (prefill or decode)."""
    waiting: int = 0
    """Requests queued, not yet scheduled."""
    used_blocks: int = 0
    """KV blocks held by running requests (not counting free cached blocks)."""
    pending_prefill_tokens: int = 0
    """Prompt tokens admitted but not yet prefilled (after prefix-cache hits)."""
    cached_blocks: int = 0
    """Blocks in the replica's prefix cache, in use or free-but-cached (0 when unknown)."""
    prefill_tokens_per_s: float = 0.0
    """Estimated prefill throughput, prompt tokens per second (0 when unknown). The owner of the
    replicas sets it from its cost model (sim) or from measured prefill times (gateway); policies
    that estimate queueing delay in seconds use it."""

    @property
    def outstanding(self) -> int:
        return self.running + self.waiting

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks held by requests, in [0, 1]."""
        return self.used_blocks / self.capacity_blocks if self.capacity_blocks else 1.0


class Decision(NamedTuple):
    replica: int
    """Index into the replica sequence the policy was given."""
    reason: str
    """Why, in a word (``"prefix"``, ``"balance"``, ``"affinity"``, ``"spill"``...): metrics label."""


class Policy(ABC):
    """A routing policy. Subclasses set ``name``; :mod:`kvharness.routing.registry` names them.

    **Choosing.** ``choose`` picks one of ``eligible``: the indices of the replicas the request
    may go to, ascending, never empty. Which replicas are eligible is the caller's rule (the
    gateway's router: healthy, below its queue limit, not yet tried for this request; the
    simulator: all). ``replicas`` and ``matched_blocks`` still cover every replica, eligible or
    not, and indices refer to them, so a policy may read the whole cluster (its load spread, say)
    but must return an eligible index.

    **State.** The ``on_*`` hooks let a policy keep state (session tables, approximate trees);
    they default to doing nothing. Callers guarantee ``on_routed`` for every ``choose`` whose
    decision was used, and ``on_finished`` once per routed request.
    """

    name: ClassVar[str]

    @abstractmethod
    def choose(
        self,
        request: RouteRequest,
        replicas: Sequence[ReplicaState],
        eligible: Sequence[int],
        matched_blocks: Sequence[int],
        now: float,
    ) -> Decision:
        """Pick one of ``eligible``. ``matched_blocks[i]``: leading blocks of the request cached
        on replica i."""

    def on_routed(self, request: RouteRequest, replica: int, now: float) -> None:  # noqa: B027
        """The request was sent to ``replica``."""

    def on_finished(self, request: RouteRequest, replica: int, now: float) -> None:  # noqa: B027
        """The request finished on ``replica`` (successfully or not)."""
