"""A paged KV block pool with a prefix cache, the way vLLM v1's ``block_pool.py`` works.

Blocks are ints ``0 .. num_blocks - 1``. Each has a reference count and, once its tokens are
computed and it is full, the chained hash of its content (then it is *cached*: findable by
:meth:`BlockPool.match`). A block with no references sits in the *free queue*, ordered by when it
was freed: :meth:`allocate` takes from the front, and a cached block taken there is evicted from the
prefix cache at that moment (a ``BlockRemoved`` event). So the free queue is the LRU of evictable
cached blocks; a cache hit on a free block (:meth:`touch`) takes it out of the queue.

Deviations from vLLM, on purpose:

* One block per hash. When a block is about to be cached under a hash another block already holds
  (two requests prefilled the same new prefix at once), it stays uncached.
* A freed block that holds no hash goes to the *front* of the free queue (vLLM appends every freed
  block at the back): it can never be hit, so reusing it first keeps useful cached blocks longer.

State changes are recorded as :mod:`kvharness.engine.events` in a list the owner drains with
:meth:`drain_events` (only when ``events=True``; by default nothing is recorded). Replaying the
events, in order, on an empty set of hashes gives exactly :meth:`cached_hashes`.

Costs: every call is O(blocks it names); nothing scans the pool.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from kvharness.engine.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

__all__ = ["BlockPool", "NoFreeBlocks"]


class NoFreeBlocks(RuntimeError):
    """:meth:`BlockPool.allocate` was asked for more blocks than are free (callers check first)."""


class BlockPool:
    """KV blocks of ``block_size`` tokens with a hash -> block prefix cache and an LRU free queue.

    ``on_evict(hash)`` is called for each cached block evicted by :meth:`allocate` (an offload tier
    hooks in there). ``medium`` labels the events (None for device memory).
    """

    __slots__ = (
        "_cached",
        "_events",
        "_free",
        "_hash",
        "_ref",
        "allocated",
        "block_size",
        "frees",
        "medium",
        "num_blocks",
        "on_evict",
    )

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        events: bool = False,
        medium: str | None = None,
        on_evict: Callable[[int], None] | None = None,
    ) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(
                f"need num_blocks > 0 and block_size > 0, got {num_blocks}, {block_size}"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.medium = medium
        self.on_evict = on_evict
        self._ref: list[int] = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}  # hash -> block id
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._events: list[KVEvent] | None = [] if events else None
        self.frees = 0
        """Times a block joined the free queue (the only way :attr:`num_free` grows)."""
        self.allocated = 0
        """Blocks handed out by :meth:`allocate` so far."""

    # -- queries (no side effects) -------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Blocks that :meth:`allocate` can hand out now (free, cached or not)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks referenced by at least one holder."""
        return self.num_blocks - len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    def match(self, hashes: Sequence[int], limit: int | None = None) -> list[int]:
        """Block ids of the longest cached prefix of ``hashes`` (at most ``limit`` blocks).

        Does not take references: call :meth:`touch` on what you keep.
        """
        n = len(hashes) if limit is None else min(limit, len(hashes))
        found = list(map(self._cached.get, hashes[:n]))  # at C speed; misses are rare mid-chain
        try:
            n = found.index(None)
        except ValueError:
            return found  # type: ignore[return-value]
        return found[:n]  # type: ignore[return-value]

    def num_evictable(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` are free (a hit on them takes them off the free queue)."""
        return list(map(self._ref.__getitem__, blocks)).count(0)

    def match_len(self, hashes: Sequence[int]) -> int:
        """Number of leading ``hashes`` cached here."""
        cached = self._cached
        n = 0
        for h in hashes:
            if h not in cached:
                break
            n += 1
        return n

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    def block_hash(self, block: int) -> int | None:
        return self._hash[block]

    def cached_hashes(self) -> set[int]:
        return set(self._cached)

    def free_order(self) -> list[int]:
        """Free block ids, next to be allocated first (for tests and debugging)."""
        return list(self._free)

    # -- mutations -----------------------------------------------------------------------------

    def touch(self, blocks: Sequence[int]) -> None:
        """Take one more reference on each block (a cache hit); free ones leave the free queue."""
        ref, free = self._ref, self._free
        for b in blocks:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, each with one reference.

        A cached block taken is evicted (its hash leaves the cache). Raises :class:`NoFreeBlocks`
        when fewer than ``n`` are free (nothing is taken then).
        """
        free = self._free
        if n > len(free):
            raise NoFreeBlocks(f"asked for {n} blocks, {len(free)} free")
        self.allocated += n
        pop = free.popitem
        out = [pop(last=False)[0] for _ in range(n)]
        ref, bhash = self._ref, self._hash
        for b in out:
            ref[b] = 1
        removed: list[int] = []
        held = list(map(bhash.__getitem__, out))
        if held.count(None) != n:
            cached = self._cached
            for b, h in zip(out, held, strict=True):
                if h is not None:
                    bhash[b] = None
                    del cached[h]
                    removed.append(h)
        if removed:
            if self._events is not None:
                self._events.append(BlockRemoved(tuple(removed), self.medium))
            if self.on_evict is not None:
                for h in removed:
                    self.on_evict(h)
        return out

    def cache(self, blocks: Sequence[int], hashes: Sequence[int], parent: int | None) -> None:
        """Name full, computed ``blocks`` by ``hashes`` (same length), continuing ``parent``.

        Blocks already holding a hash are skipped, as are hashes another block holds already.
        Emits one ``BlockStored`` for the newly cached run(s).
        """
        bhash, cached = self._hash, self._cached
        if len(blocks) != len(hashes):
            raise ValueError(f"{len(blocks)} blocks but {len(hashes)} hashes")
        n = len(blocks)
        if (
            list(map(bhash.__getitem__, blocks)).count(None) == n
            and not any(map(cached.__contains__, hashes))
            and len(set(hashes)) == n
        ):
            # The common case (fresh blocks, new content), at C speed but for one loop.
            cached.update(zip(hashes, blocks, strict=True))
            for b, h in zip(blocks, hashes, strict=True):
                bhash[b] = h
            if hashes:
                self._emit_stored(list(hashes), parent)
            return
        stored: list[int] = []
        for b, h in zip(blocks, hashes, strict=True):
            if bhash[b] is not None or h in cached:
                if stored:
                    self._emit_stored(stored, parent)
                    stored = []
                parent = h
                continue
            bhash[b] = h
            cached[h] = b
            stored.append(h)
        if stored:
            self._emit_stored(stored, parent)

    def _emit_stored(self, stored: list[int], parent: int | None) -> None:
        if self._events is not None:
            self._events.append(
                BlockStored(tuple(stored), parent, (), self.block_size, self.medium)
            )

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference on each block. Blocks reaching zero join the free queue, the last of
        ``blocks`` first, so a chain's tail is evicted before its head; uncached ones go to the
        front (they are reused first)."""
        ref, free, bhash = self._ref, self._free, self._hash
        order = blocks[::-1]
        for b in order:
            ref[b] -= 1
        refs = list(map(ref.__getitem__, order))
        if min(refs, default=0) < 0:
            for b in order:  # undo, then report
                ref[b] += 1
            raise RuntimeError("a block was freed more often than referenced")
        if 0 not in refs:
            return
        zero = [b for b, r in zip(order, refs, strict=True) if r == 0]
        self.frees += len(zero)
        free.update(dict.fromkeys(zero))
        for b in zero:
            if bhash[b] is None:
                free.move_to_end(b, last=False)

    def reset(self) -> bool:
        """Drop the whole prefix cache if no block is in use; returns whether it did."""
        if self.num_used:
            return False
        for b in self._cached.values():
            self._hash[b] = None
        self._cached.clear()
        if self._events is not None:
            self._events.append(AllBlocksCleared())
        return True

    def drain_events(self) -> list[KVEvent]:
        """The events recorded since the last drain, oldest first (empty when events are off)."""
        if not self._events:
            return []
        out = self._events
        self._events = []
        return out
