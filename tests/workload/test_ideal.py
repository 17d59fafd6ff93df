from __future__ import annotations

from kvharness.workload.chain import BlockChain
from kvharness.workload.ideal import IdealCache, engine_cached_tokens


def test_ideal_cache_prefix_and_partial_blocks() -> None:
    cache = IdealCache()
    a = BlockChain(4, (1, 2, 3), 10)  # blocks of 4, 4, 2 tokens
    assert cache.visit(a) == (0, 0)
    b = BlockChain(4, (1, 2, 3, 4), 16)
    # 1 and 2 are full hits (8 tokens); block 3 was cached with 2 tokens only: 2 more, then stop.
    assert cache.visit(b) == (10, 3)
    c = BlockChain(4, (1, 9, 3), 12)
    # block 1 hits (4 tokens); 9 misses, so 3 (present) is not reachable as a prefix.
    assert cache.lookup(c) == (4, 1)


def test_engine_cached_tokens_is_block_granular_and_leaves_last_token() -> None:
    assert engine_cached_tokens(1000, 2000, 128) == 896  # floor(1000 / 128) * 128
    assert engine_cached_tokens(2000, 2000, 128) == 1920  # whole prompt hit: last block recomputed
    assert engine_cached_tokens(256, 257, 128) == 256
    assert engine_cached_tokens(256, 256, 128) == 128
    assert engine_cached_tokens(0, 0, 128) == 0
