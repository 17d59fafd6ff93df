"""The one block hash: chained names of token-id blocks, as the workload and the gateway use it."""

from __future__ import annotations

import random

import pytest

from kvharness.workload.chain import ROOT_HASH, ChainBuilder, block_hash, chain_hashes


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
