"""Engine block hashes renamed to the gateway's chained hashes."""

from __future__ import annotations

import pytest

from kvharness.engine.events import BlockRemoved, BlockStored
from kvharness.gateway.hash_translator import HashTranslator
from kvharness.workload.chain import chain_hashes

BS = 4


def tokens(n: int, base: int = 0) -> list[int]:
    return [base + i for i in range(n)]


def test_translator_renames_engine_hashes_to_gateway_chain() -> None:
    t = HashTranslator()
    ids = tokens(12)
    own = chain_hashes(ids, BS)
    first = t.translate(BlockStored((101, 102), None, tuple(ids[:8]), BS))
    assert isinstance(first, BlockStored)
    assert first.block_hashes == tuple(own[:2]) and first.parent_block_hash is None
    # A continuation names its parent by the engine's hash; the gateway's parent is own[1].
    second = t.translate(BlockStored((103,), 102, tuple(ids[8:12]), BS))
    assert isinstance(second, BlockStored)
    assert second.block_hashes == (own[2],) and second.parent_block_hash == own[1]
    assert t.translate(BlockRemoved((103, 999))) == BlockRemoved((own[2],))
    assert t.translate(BlockRemoved((999,))) is None
    assert len(t) == 2


def test_translator_counts_aliases() -> None:
    # Two engine hashes (e.g. different cache salts) for the same tokens: one gateway block,
    # gone only when both are.
    t = HashTranslator()
    ids = tuple(tokens(BS))
    t.translate(BlockStored((1,), None, ids, BS))
    t.translate(BlockStored((2,), None, ids, BS))
    assert t.translate(BlockRemoved((1,))) is None
    assert t.translate(BlockRemoved((2,))) == BlockRemoved(tuple(chain_hashes(list(ids), BS)))


def test_translator_unknown_parent_and_recovery() -> None:
    t = HashTranslator(recovery_stores=2)
    ids = tokens(12)
    own = chain_hashes(ids, BS)
    # The stores of blocks 0-1 were lost: block 2's parent (engine hash 52) is unknown.
    assert t.translate(BlockStored((53,), 52, tuple(ids[8:]), BS)) is None
    t.start_recovery()
    t.learn_route(own, ids, BS)  # the gateway routed this prompt
    got = t.translate(BlockStored((53,), 52, tuple(ids[8:]), BS))
    assert isinstance(got, BlockStored) and got.block_hashes == (own[2],)
    assert got.parent_block_hash == own[1]
    # Recovery ends after `recovery_stores` stores that needed no help.
    t.translate(BlockStored((60,), None, tuple(tokens(BS, 500)), BS))
    t.translate(BlockStored((61,), 60, tuple(tokens(BS, 600)), BS))
    assert not t.recovering


def test_translator_rejects_short_token_ids() -> None:
    with pytest.raises(ValueError, match="carries 3 token ids"):
        HashTranslator().translate(BlockStored((1,), None, (1, 2, 3), BS))
