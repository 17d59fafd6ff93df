"""Eviction policies: what happens to a request's KV blocks when it finishes, and a CPU tier.

* :class:`LRU` (vLLM's): a finished request drops its references; its cached blocks stay findable
  until the free queue's LRU order reaches them.
* :class:`SessionTTL` (Continuum's idea): a finished turn whose session continues after a tool call
  keeps its prompt blocks *pinned* (one extra reference) for a time-to-live; the TTL for a tool is a
  quantile of the gaps observed after that tool (:class:`ToolTTL`). The pin ends when the session's
  next turn is admitted on this replica, when the TTL expires, or early when memory runs out (pins
  are soft: :meth:`release_one` releases the ones expiring first before the scheduler preempts).
* :class:`CpuTier`: blocks evicted from device memory are copied to a host-memory LRU tier; a later
  prefix hit there is loaded back at ``bytes / PCIe bandwidth``.

Policies hold a :class:`~kvharness.engine.block_pool.BlockPool` (given by :meth:`bind`) and take
``now`` (seconds) as an argument; they never read a clock.
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict, deque
from collections.abc import Sequence

from kvharness.engine.block_pool import BlockPool
from kvharness.engine.events import BlockRemoved, BlockStored, KVEvent
from kvharness.engine.request import Request
from kvharness.registry import Registry

__all__ = [
    "EVICTIONS",
    "LRU",
    "CpuTier",
    "EvictionPolicy",
    "SessionTTL",
    "ToolTTL",
    "make_eviction",
]


class EvictionPolicy:
    """Base policy = LRU: free everything at finish. Subclasses override the hooks.

    Every policy is made as ``cls(ttls)``: ``ttls`` is the run's per-tool time-to-live table,
    shared by all replicas; policies that do not pin by tool ignore it.
    """

    name = "lru"

    def __init__(self, ttls: ToolTTL | None = None) -> None:
        self.pool: BlockPool | None = None

    def bind(self, pool: BlockPool) -> None:
        self.pool = pool

    def _pool(self) -> BlockPool:
        if self.pool is None:
            raise RuntimeError("eviction policy used before bind()")
        return self.pool

    def on_finish(self, req: Request, now: float) -> None:
        """``req`` finished: release (or keep) its blocks. Mutates the pool."""
        self._pool().free(req.blocks)
        req.blocks = []

    def on_admit(self, req: Request, now: float) -> None:
        """``req`` was admitted and holds its own references now."""

    def expire(self, now: float) -> None:
        """Release whatever is due by ``now``."""

    def release_one(self, now: float) -> bool:
        """Give back some held blocks early to make room (called before preempting or refusing
        admission, repeatedly while it returns True)."""
        return False

    @property
    def num_pinned(self) -> int:
        return 0


class LRU(EvictionPolicy):
    """vLLM's policy (the base behaviour), by name."""


class ToolTTL:
    """Per-tool time-to-live: the ``quantile`` of the last ``window`` gaps seen after each tool.

    Shared by all replicas of a run; fed by the driver (:meth:`observe`) as turns are sent.
    Before ``min_samples`` gaps of a tool are seen, all tools' gaps are used, and ``default`` (s)
    before any. TTLs are capped at ``max_ttl`` (s).
    """

    def __init__(
        self,
        quantile: float = 0.9,
        default: float = 2.0,
        max_ttl: float = 300.0,
        window: int = 256,
        min_samples: int = 5,
    ) -> None:
        if not 0 < quantile <= 1:
            raise ValueError("quantile must be in (0, 1]")
        self.quantile = quantile
        self.default = default
        self.max_ttl = max_ttl
        self.window = window
        self.min_samples = min_samples
        self._gaps: dict[str | None, tuple[deque[float], list[float]]] = {}

    def observe(self, tool: str | None, gap: float) -> None:
        for key in {tool, "*"}:
            recent, ordered = self._gaps.setdefault(key, (deque(), []))
            recent.append(gap)
            bisect.insort(ordered, gap)
            if len(recent) > self.window:
                old = recent.popleft()
                del ordered[bisect.bisect_left(ordered, old)]

    def ttl(self, tool: str | None) -> float:
        entry = self._gaps.get(tool)
        if entry is None or len(entry[1]) < self.min_samples:
            entry = self._gaps.get("*")
        if entry is None or not entry[1]:
            return min(self.default, self.max_ttl)
        ordered = entry[1]
        i = min(len(ordered) - 1, int(self.quantile * len(ordered)))
        return min(ordered[i], self.max_ttl)


class SessionTTL(EvictionPolicy):
    """Pin a finished turn's prompt blocks while its session's tool runs (see module docstring)."""

    name = "ttl"

    def __init__(self, ttls: ToolTTL | None = None) -> None:
        super().__init__()
        self.ttls = ttls if ttls is not None else ToolTTL()
        self._heap: list[tuple[float, int, str]] = []
        self._pins: dict[str, tuple[float, int, list[int]]] = {}  # session -> (expiry, seq, blocks)
        self._seq = 0
        self._pinned = 0

    @property
    def num_pinned(self) -> int:
        return self._pinned

    def on_finish(self, req: Request, now: float) -> None:
        pool = self._pool()
        keep = req.blocks[: req.num_hashed]
        if req.last_turn or req.session is None or not keep:
            super().on_finish(req, now)
            return
        ttl = self.ttls.ttl(req.next_tool)
        self._unpin(req.session)
        pool.free(req.blocks[req.num_hashed :])
        req.blocks = []
        if ttl <= 0:
            pool.free(keep)
            return
        self._seq += 1
        self._pins[req.session] = (now + ttl, self._seq, keep)
        self._pinned += len(keep)
        heapq.heappush(self._heap, (now + ttl, self._seq, req.session))

    def _unpin(self, session: str) -> None:
        pin = self._pins.pop(session, None)
        if pin is not None:
            self._pinned -= len(pin[2])
            self._pool().free(pin[2])

    def on_admit(self, req: Request, now: float) -> None:
        if req.session is not None:
            self._unpin(req.session)

    def _pop_due(self, until: float | None) -> bool:
        heap = self._heap
        while heap:
            expiry, seq, session = heap[0]
            pin = self._pins.get(session)
            if pin is None or pin[1] != seq:
                heapq.heappop(heap)  # stale entry
                continue
            if until is not None and expiry > until:
                return False
            heapq.heappop(heap)
            self._unpin(session)
            return True
        return False

    def expire(self, now: float) -> None:
        while self._pop_due(now):
            pass

    def release_one(self, now: float) -> bool:
        return self._pop_due(None)


class CpuTier:
    """A host-memory LRU of evicted blocks (hashes only), ``capacity`` blocks, with events.

    Hook it to a pool with ``BlockPool(on_evict=tier.put)``. :meth:`match` counts consecutive hits
    from a position; :meth:`load_seconds` is the transfer time for blocks brought back.
    """

    def __init__(self, capacity: int, block_bytes: float, bandwidth: float) -> None:
        if capacity <= 0 or bandwidth <= 0:
            raise ValueError("CPU tier needs capacity > 0 and bandwidth > 0")
        self.capacity = capacity
        self.block_bytes = block_bytes
        self.bandwidth = bandwidth
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._events: list[KVEvent] = []
        self.events_enabled = False
        self.loaded_blocks = 0

    def put(self, block_hash: int) -> None:
        lru = self._lru
        if block_hash in lru:
            lru.move_to_end(block_hash)
            return
        lru[block_hash] = None
        removed: tuple[int, ...] = ()
        if len(lru) > self.capacity:
            removed = (lru.popitem(last=False)[0],)
        if self.events_enabled:
            self._events.append(BlockStored((block_hash,), None, (), 0, "CPU"))
            if removed:
                self._events.append(BlockRemoved(removed, "CPU"))

    def match(self, hashes: Sequence[int], start: int, limit: int) -> int:
        """Consecutive ``hashes[start:limit]`` held here; they become most recently used."""
        lru = self._lru
        n = 0
        for i in range(start, min(limit, len(hashes))):
            h = hashes[i]
            if h not in lru:
                break
            lru.move_to_end(h)
            n += 1
        return n

    def load_seconds(self, blocks: int) -> float:
        self.loaded_blocks += blocks
        return blocks * self.block_bytes / self.bandwidth

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._lru

    def drain_events(self) -> list[KVEvent]:
        out, self._events = self._events, []
        return out


EVICTIONS: Registry[EvictionPolicy] = Registry(
    "eviction policy", {LRU.name: LRU, SessionTTL.name: SessionTTL}
)


def make_eviction(name: str, ttls: ToolTTL | None = None) -> EvictionPolicy:
    """An eviction policy by name (:data:`EVICTIONS`: ``lru``, ``ttl``) sharing ``ttls``."""
    return EVICTIONS.make(name, ttls)
