from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvharness.workload.chain import (
    BlockChain,
    ChainBuilder,
    block_tokens,
    materialise,
    materialise_text,
    shared_prefix_tokens,
)


def test_chain_invariant_checked() -> None:
    with pytest.raises(ValueError, match="need 3 block hashes"):
        BlockChain(4, (1, 2), 9)
    c = BlockChain(4, (1, 2, 3), 9)
    assert c.num_full_blocks == 2 and c.tail_tokens == 1
    assert c.full_hashes == (1, 2)
    assert [c.block_len(i) for i in range(3)] == [4, 4, 1]


def test_builder_same_content_same_chain_and_prefix_property() -> None:
    a, b = ChainBuilder(4), ChainBuilder(4)
    a.extend_tokens(range(10))
    b.extend_tokens(range(6))
    b.extend_tokens(range(6, 10))
    assert a.chain() == b.chain()
    b.extend_tokens([99, 98, 97])
    # The first two full blocks agree; the third differs (a had a partial tail there).
    assert b.chain().hashes[:2] == a.chain().hashes[:2]
    assert shared_prefix_tokens(a.chain(), b.chain()) == 8


def test_segments_and_tokens_hash_independently_of_how_they_are_split() -> None:
    a, b = ChainBuilder(8), ChainBuilder(8)
    a.extend_segment(7, 20)
    b.extend_segment(7, 20)
    assert a.chain() == b.chain()
    c = ChainBuilder(8)
    c.extend_segment(8, 20)
    assert c.chain().hashes[0] != a.chain().hashes[0]


def test_materialise_equal_hashes_equal_tokens_and_tail_is_prefix() -> None:
    full = BlockChain(16, (11, 22), 32)
    part = BlockChain(16, (11, 22), 20)
    ids_full, ids_part = materialise(full, 1000), materialise(part, 1000)
    assert len(ids_full) == 32 and len(ids_part) == 20
    assert ids_full[:20] == ids_part
    assert all(0 <= t < 1000 for t in ids_full)
    other = materialise(BlockChain(16, (12, 22), 32), 1000)
    assert other[:16] != ids_full[:16]
    assert materialise(full, 1000, low=900) != ids_full
    assert min(materialise(full, 1000, low=900)) >= 900


def test_block_tokens_deterministic_and_spread() -> None:
    t1 = block_tokens(123456789, 128, 1024)
    assert (t1 == block_tokens(123456789, 128, 1024)).all()
    assert len(set(t1.tolist())) > 90  # 128 draws from 1024: collisions are few


def test_materialise_text_extends_prefix_text() -> None:
    t_part = materialise_text(BlockChain(4, (5, 6), 6))
    t_full = materialise_text(BlockChain(4, (5, 6, 7), 12))
    assert t_full.startswith(t_part)
    assert len(t_part.split()) == 6


@given(
    st.integers(1, 64),
    st.lists(st.integers(0, 2000), min_size=1, max_size=300),
    st.integers(1, 64),
)
def test_rechunk_agrees_exactly_as_far_as_tokens_agree(
    bs: int, toks: list[int], engine_bs: int
) -> None:
    a, b = ChainBuilder(bs), ChainBuilder(bs)
    a.extend_tokens(toks)
    cut = len(toks) // 2
    b.extend_tokens(toks[:cut] + [5000] * (len(toks) - cut))
    ra, rb = a.chain().rechunk(engine_bs), b.chain().rechunk(engine_bs)
    assert len(ra) == len(toks) // engine_bs
    # Engine blocks fully inside the common prefix agree, but only if the source blocks holding
    # their last token are full or identical in both chains.
    same = sum(1 for x, y in zip(ra, rb, strict=True) if x == y)
    common = shared_prefix_tokens(a.chain(), b.chain())
    assert same == common // engine_bs
    assert ra[:same] == rb[:same]
