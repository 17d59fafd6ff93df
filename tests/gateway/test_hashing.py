from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvharness.gateway.hashing import (
    ROOT_HASH,
    ByteChainHasher,
    block_hash,
    byte_chain_hashes,
    chain_hashes,
)
from kvharness.workload.chain import ChainBuilder


def test_chain_matches_workload_chain_builder() -> None:
    rng = random.Random(1)
    ids = [rng.randrange(1 << 17) for _ in range(1000)]
    for bs in (16, 128):
        builder = ChainBuilder(bs)
        builder.extend_tokens(ids)
        assert tuple(chain_hashes(ids, bs)) == builder.chain().full_hashes


def test_chain_continues_from_a_parent() -> None:
    ids = list(range(40))
    full = chain_hashes(ids, 8)
    assert len(full) == 5
    assert chain_hashes(ids, 8, parent=full[1], start=16) == full[2:]
    assert full[0] == block_hash(ROOT_HASH, ids[:8])
    assert chain_hashes(ids[:7], 8) == []


def test_chain_names_whole_prefixes() -> None:
    a = chain_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4)
    b = chain_hashes([9, 2, 3, 4, 5, 6, 7, 8], 4)
    assert a[1] != b[1]  # same second block, different prefix


@pytest.mark.parametrize(("bs", "start"), [(0, 0), (4, 3)])
def test_chain_rejects_bad_arguments(bs: int, start: int) -> None:
    with pytest.raises(ValueError):
        chain_hashes([1, 2, 3, 4], bs, start=start)


@given(
    data=st.binary(max_size=600),
    cuts=st.lists(st.integers(0, 600), max_size=8),
    width=st.integers(1, 70),
    max_blocks=st.none() | st.integers(0, 12),
)
def test_byte_chain_hasher_in_pieces_is_the_whole_chain_cut(
    data: bytes, cuts: list[int], width: int, max_blocks: int | None
) -> None:
    hasher = ByteChainHasher(width, max_blocks=max_blocks)
    at = 0
    for cut in sorted(min(c, len(data)) for c in cuts):
        hasher.feed(data[at:cut])
        at = cut
    hasher.feed(data[at:])
    whole = byte_chain_hashes(data, width)
    assert hasher.hashes == (whole if max_blocks is None else whole[:max_blocks])
    assert hasher.size == len(data)
