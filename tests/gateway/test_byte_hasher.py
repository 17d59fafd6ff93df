"""Prompts hashed by their bytes (no tokenizer): pieces fed in any cut give the whole chain."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvharness.gateway.byte_hasher import ByteChainHasher, approximate, byte_chain_hashes


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


def test_approximate_hashes_the_pieces_as_one_text() -> None:
    text = "def f(x):\n    return x * 2\n" * 40
    whole = approximate([text], block_size=4, max_blocks=1000)
    pieces = approximate([text[:17], text[17:300], text[300:]], block_size=4, max_blocks=1000)
    assert whole == pieces and whole.num_tokens == len(text) // 4
    assert list(whole.block_hashes) == byte_chain_hashes(text.encode(), 16)
    assert approximate([text], block_size=4, max_blocks=3).block_hashes == whole.block_hashes[:3]
