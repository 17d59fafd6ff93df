"""Block pool: hand-worked cases, then property tests over random operation sequences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvharness.engine.block_pool import BlockPool, NoFreeBlocks
from kvharness.engine.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent


def replay(events: list[KVEvent], into: set[int] | None = None) -> set[int]:
    held = set() if into is None else into
    for e in events:
        if isinstance(e, BlockStored):
            held.update(e.block_hashes)
        elif isinstance(e, BlockRemoved):
            held.difference_update(e.block_hashes)
        else:
            held.clear()
    return held


def test_hit_after_free_and_ref_counts() -> None:
    pool = BlockPool(8, 4, events=True)
    a = pool.allocate(3)
    pool.cache(a, [11, 12, 13], None)
    assert pool.match([11, 12, 13, 14]) == a
    assert pool.match([11, 99, 13]) == a[:1]
    assert pool.match([11, 12, 13], limit=2) == a[:2]
    # A second holder of the first two blocks.
    pool.touch(a[:2])
    assert [pool.ref_count(b) for b in a] == [2, 2, 1]
    pool.free(a)
    assert [pool.ref_count(b) for b in a] == [1, 1, 0]
    assert pool.num_free == 6
    # Freed but cached: still a hit; touching takes it out of the free queue.
    assert pool.match([11, 12, 13]) == a
    pool.touch(a[2:])
    assert pool.num_free == 5
    assert pool.drain_events() == [BlockStored((11, 12, 13), None, (), 4, None)]
    assert pool.drain_events() == []


def test_eviction_order_is_lru_with_chain_tails_first() -> None:
    pool = BlockPool(4, 4, events=True)
    x = pool.allocate(2)
    pool.cache(x, [1, 2], None)
    y = pool.allocate(2)
    pool.cache(y, [3, 4], None)
    pool.free(x)  # x freed first: its tail (2) then head (1)
    pool.free(y)
    assert pool.free_order() == [x[1], x[0], y[1], y[0]]
    pool.drain_events()
    got = pool.allocate(3)
    assert got == [x[1], x[0], y[1]]
    assert pool.drain_events() == [BlockRemoved((2, 1, 4))]
    assert pool.cached_hashes() == {3}
    assert pool.match([3]) == [y[0]]


def test_uncached_blocks_are_reused_first() -> None:
    pool = BlockPool(4, 4)
    a = pool.allocate(2)
    pool.cache(a[:1], [7], None)  # a[1] holds a partial block, never cached
    pool.free(a)
    assert pool.free_order()[0] == a[1]
    pool.allocate(3)
    assert pool.cached_hashes() == {7}


def test_touch_refreshes_lru_position() -> None:
    pool = BlockPool(3, 4)
    a = pool.allocate(3)
    pool.cache(a, [1, 2, 3], None)
    pool.free([a[0]])
    pool.free([a[1]])
    pool.free([a[2]])
    pool.touch([a[0]])  # a hit on block 1 moves it out, then back to the MRU end
    pool.free([a[0]])
    assert pool.free_order() == [a[1], a[2], a[0]]


def test_duplicate_hash_stays_uncached_and_events_split() -> None:
    pool = BlockPool(6, 4, events=True)
    a = pool.allocate(2)
    pool.cache(a, [1, 2], None)
    b = pool.allocate(3)
    pool.cache(b, [1, 2, 3], None)  # 1 and 2 are held by a: only 3 is new
    assert pool.block_hash(b[0]) is None and pool.block_hash(b[2]) == 3
    assert pool.drain_events() == [
        BlockStored((1, 2), None, (), 4, None),
        BlockStored((3,), 2, (), 4, None),
    ]


def test_allocate_too_many_and_double_free() -> None:
    pool = BlockPool(2, 4)
    with pytest.raises(NoFreeBlocks):
        pool.allocate(3)
    assert pool.num_free == 2  # nothing taken
    a = pool.allocate(1)
    pool.free(a)
    with pytest.raises(RuntimeError, match="freed more often"):
        pool.free(a)


def test_reset_only_when_idle() -> None:
    pool = BlockPool(2, 4, events=True)
    a = pool.allocate(1)
    pool.cache(a, [5], None)
    assert not pool.reset()
    pool.free(a)
    assert pool.reset()
    assert pool.cached_hashes() == set()
    assert isinstance(pool.drain_events()[-1], AllBlocksCleared)


def test_events_off_by_default() -> None:
    pool = BlockPool(2, 4)
    pool.cache(pool.allocate(1), [5], None)
    assert pool.drain_events() == []


# -- properties ---------------------------------------------------------------------------------

ops = st.lists(
    st.tuples(
        st.sampled_from(["alloc", "free", "hit", "reset"]),
        st.integers(0, 5),  # which chain
        st.integers(1, 6),  # how many blocks
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(4, 20))
def test_no_leak_no_double_free_and_events_replay(
    script: list[tuple[str, int, int]], n: int
) -> None:
    """Holders take blocks (fresh or by hits) and give them back; the pool's books balance and
    the KV events, replayed, always give the cached set."""
    pool = BlockPool(n, 4, events=True)
    holders: list[list[int]] = []
    mirror: set[int] = set()
    for op, chain, k in script:
        hashes = [chain * 100 + i for i in range(k)]
        if op == "alloc" and k <= pool.num_free:
            blocks = pool.allocate(k)
            pool.cache(blocks, hashes, None)
            holders.append(blocks)
        elif op == "hit":
            hit = pool.match(hashes)
            evictable = sum(1 for b in hit if pool.ref_count(b) == 0)
            need = k - len(hit)
            if need + evictable <= pool.num_free:
                pool.touch(hit)
                blocks = hit + pool.allocate(need)
                pool.cache(blocks, hashes, None)
                holders.append(blocks)
        elif op == "free" and holders:
            pool.free(holders.pop(chain % len(holders)))
        elif op == "reset":
            pool.reset()
        replay(pool.drain_events(), mirror)
        assert mirror == pool.cached_hashes()
        # Every reference is accounted for by a holder; free blocks have none.
        counts = [0] * n
        for blocks in holders:
            for b in blocks:
                counts[b] += 1
        assert counts == [pool.ref_count(b) for b in range(n)]
        free = pool.free_order()
        assert len(free) == len(set(free)) == pool.num_free
        assert all(counts[b] == 0 for b in free)
        assert pool.num_used == sum(1 for c in counts if c)
    for blocks in holders:
        pool.free(blocks)
    assert pool.num_free == n


def test_repeated_hash_in_one_chain_is_cached_once() -> None:
    pool = BlockPool(4, 4, events=True)
    a = pool.allocate(3)
    pool.cache(a, [5, 6, 5], None)
    assert pool.cached_hashes() == {5, 6} and pool.block_hash(a[2]) is None
    pool.free(a)
    pool.allocate(4)  # evicts everything; the books must balance
    assert pool.cached_hashes() == set()
