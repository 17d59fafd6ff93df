"""The prefix index: which replicas hold which cached blocks, and how long a prompt's cached prefix is
on each of them.

Two ways to feed it, per replica:

* **KV events** (:meth:`PrefixIndex.apply`): the engine says which blocks entered and left its prefix
  cache (``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``), from the engine model in the
  simulator or from vLLM over ZMQ live. The index then mirrors the engine exactly.
* **The router's own decisions** (:meth:`PrefixIndex.record_routed`), for backends that publish no
  events: a request's blocks are assumed cached where it was sent, and a per-replica LRU bounded at
  ``lru_capacity`` blocks approximates the engine's eviction.

A block counts as cached on a replica while any tier holds it (device memory, or a CPU offload tier
when events carry ``medium="CPU"``); :meth:`match` can be restricted to device memory.

Costs: :meth:`match` is O(matched prefix length x replicas holding it), independent of how many
blocks are cached; ``apply`` is O(blocks in the event) (``AllBlocksCleared`` and :meth:`mark_stale`
are O(blocks of that replica)).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from kvharness.engine.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

__all__ = ["PrefixIndex"]

_GPU = 1
_CPU = 2
_EMPTY: frozenset[int] = frozenset()


def _medium_bit(medium: str | None) -> int:
    return _CPU if medium is not None and medium.upper() == "CPU" else _GPU


class PrefixIndex:
    """Block hash -> replicas, per replica fed by KV events or by routing decisions.

    Replicas are numbered ``0..num_replicas-1`` (the order of the policy's replica sequence).
    ``lru_capacity`` (blocks, one value or one per replica) bounds what :meth:`record_routed`
    assumes cached; ``None`` means unbounded. Not thread-safe: one owner mutates it.
    """

    __slots__ = ("_held", "_lru", "_lru_capacity", "_where")

    def __init__(self, num_replicas: int, lru_capacity: int | Sequence[int] | None = None) -> None:
        if num_replicas < 0:
            raise ValueError(f"num_replicas must be >= 0, got {num_replicas}")
        # hash -> replicas holding it on any tier.
        self._where: dict[int, set[int]] = {}
        # per replica: hash -> bitmask of tiers holding it (_GPU | _CPU).
        self._held: list[dict[int, int]] = []
        # per replica: hashes recorded by routing decisions, least recently used first.
        self._lru: list[OrderedDict[int, None]] = []
        self._lru_capacity: list[int | None] = []
        for _ in range(num_replicas):
            self.add_replica()
        if lru_capacity is not None:
            caps = (
                [lru_capacity] * num_replicas
                if isinstance(lru_capacity, int)
                else list(lru_capacity)
            )
            if len(caps) != num_replicas:
                raise ValueError(f"{len(caps)} LRU capacities for {num_replicas} replicas")
            for r, cap in enumerate(caps):
                self.set_lru_capacity(r, cap)

    # --- shape -----------------------------------------------------------------------------

    @property
    def num_replicas(self) -> int:
        return len(self._held)

    def add_replica(self, lru_capacity: int | None = None) -> int:
        """Append an empty replica; returns its number."""
        self._held.append({})
        self._lru.append(OrderedDict())
        self._lru_capacity.append(None)
        r = len(self._held) - 1
        if lru_capacity is not None:
            self.set_lru_capacity(r, lru_capacity)
        return r

    def set_lru_capacity(self, replica: int, capacity: int | None) -> None:
        """Bound (in blocks) what routing decisions assume cached on ``replica``."""
        if capacity is not None and capacity < 0:
            raise ValueError(f"LRU capacity must be >= 0, got {capacity}")
        self._lru_capacity[replica] = capacity
        self._trim(replica)

    def cached_blocks(self, replica: int) -> int:
        """Number of distinct blocks the index believes ``replica`` holds (any tier)."""
        return len(self._held[replica])

    def holds(self, replica: int, block_hash: int) -> bool:
        return block_hash in self._held[replica]

    # --- feeding: KV events ----------------------------------------------------------------

    def apply(self, replica: int, event: KVEvent) -> None:
        """Apply one KV event published by ``replica``."""
        if isinstance(event, BlockStored):
            bit = _medium_bit(event.medium)
            for h in event.block_hashes:
                self._add(replica, h, bit)
        elif isinstance(event, BlockRemoved):
            bit = _medium_bit(event.medium)
            for h in event.block_hashes:
                self._remove(replica, h, bit)
        elif isinstance(event, AllBlocksCleared):
            self._clear(replica)
        else:  # pragma: no cover - the union is closed
            raise TypeError(f"not a KV event: {event!r}")

    def apply_all(self, replica: int, events: Iterable[KVEvent]) -> None:
        for event in events:
            self.apply(replica, event)

    def mark_stale(self, replica: int) -> None:
        """Forget everything about ``replica`` (its event stream had a gap, or it restarted).

        Its entries are dropped rather than trusted; later events rebuild them. Routing then sees
        no cached prefix there, which costs hits but never sends work after blocks that are gone.
        """
        self._clear(replica)

    # --- feeding: routing decisions --------------------------------------------------------

    def record_routed(self, replica: int, block_hashes: Sequence[int]) -> None:
        """Assume ``block_hashes`` (a prompt's full blocks) are now cached on ``replica``.

        They become the most recently used; beyond the replica's LRU capacity the least recently
        used recorded blocks are forgotten, which approximates the engine's own LRU eviction.
        """
        lru = self._lru[replica]
        for h in block_hashes:
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
                self._add(replica, h, _GPU)
        self._trim(replica)

    def _trim(self, replica: int) -> None:
        cap = self._lru_capacity[replica]
        if cap is None:
            return
        lru = self._lru[replica]
        while len(lru) > cap:
            h, _ = lru.popitem(last=False)
            self._remove(replica, h, _GPU, from_lru=False)

    # --- queries ---------------------------------------------------------------------------

    def match(self, block_hashes: Sequence[int], *, device_only: bool = False) -> list[int]:
        """Leading blocks of ``block_hashes`` cached on each replica (a list, one per replica).

        ``device_only`` counts only blocks in device memory, not in a CPU tier.
        """
        out = [0] * len(self._held)
        if not block_hashes:
            return out
        where = self._where
        held = self._held
        first = block_hashes[0]
        alive = set(where.get(first, _EMPTY))
        if device_only:
            alive = {r for r in alive if held[r][first] & _GPU}
        depth = 1  # every replica in `alive` holds blocks [0, depth)
        for h in block_hashes[1:]:
            if not alive:
                break
            holders = where.get(h, _EMPTY)
            if device_only:
                nxt = {r for r in alive if r in holders and held[r][h] & _GPU}
            elif alive <= holders:  # the common case: nobody drops out, no new set
                depth += 1
                continue
            else:
                nxt = alive & holders
            if len(nxt) != len(alive):
                for r in alive - nxt:
                    out[r] = depth
            alive = nxt
            depth += 1
        for r in alive:
            out[r] = depth
        return out

    # --- internals -------------------------------------------------------------------------

    def _add(self, replica: int, h: int, bit: int) -> None:
        held = self._held[replica]
        mask = held.get(h, 0)
        if not mask:
            self._where.setdefault(h, set()).add(replica)
        held[h] = mask | bit

    def _remove(self, replica: int, h: int, bit: int, *, from_lru: bool = True) -> None:
        held = self._held[replica]
        mask = held.get(h, 0) & ~bit
        if mask:
            held[h] = mask
            return
        if held.pop(h, None) is None:
            return
        if from_lru:
            self._lru[replica].pop(h, None)
        holders = self._where.get(h)
        if holders is not None:
            holders.discard(replica)
            if not holders:
                del self._where[h]

    def _clear(self, replica: int) -> None:
        where = self._where
        for h in self._held[replica]:
            holders = where.get(h)
            if holders is not None:
                holders.discard(replica)
                if not holders:
                    del where[h]
        self._held[replica] = {}
        self._lru[replica].clear()
