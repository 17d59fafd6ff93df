"""The ideal prefix cache: what an infinite cache on one replica would reuse.

Used for the ``ideal_cached_tokens`` of every per-turn record and for workload statistics.
"""

from __future__ import annotations

from typing import NamedTuple

from kvharness.workload.chain import BlockChain

__all__ = ["IdealCache", "IdealHit", "engine_cached_tokens"]


class IdealHit(NamedTuple):
    tokens: int
    """Prompt tokens found as a cached prefix (token-exact at the chain's block size)."""
    blocks: int
    """Blocks of the chain found, a partially matched block counting as found."""


class IdealCache:
    """An infinite prefix cache over chains of one block size. Memory grows with distinct blocks.

    :meth:`lookup` is O(matched blocks); :meth:`insert` is O(blocks of the chain).
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        # block hash -> most tokens of that block ever cached (block_size for a full block).
        self._seen: dict[int, int] = {}

    def lookup(self, chain: BlockChain) -> IdealHit:
        tokens = blocks = 0
        seen = self._seen
        for i, h in enumerate(chain.hashes):
            have = seen.get(h)
            if have is None:
                break
            need = chain.block_len(i)
            blocks += 1
            tokens += min(have, need)
            if have < need:
                break
        return IdealHit(tokens, blocks)

    def insert(self, chain: BlockChain) -> None:
        seen = self._seen
        for i, h in enumerate(chain.hashes):
            n = chain.block_len(i)
            if seen.get(h, -1) < n:
                seen[h] = n

    def visit(self, chain: BlockChain) -> IdealHit:
        """Look a prompt up, then cache it (what serving it does)."""
        hit = self.lookup(chain)
        self.insert(chain)
        return hit


def engine_cached_tokens(matched: int, prompt_tokens: int, engine_block_size: int) -> int:
    """Cached tokens an engine with ``engine_block_size`` reports for a ``matched``-token prefix.

    Engines cache whole blocks only, and always compute at least the last prompt token (vLLM
    recomputes the final block when the whole prompt is a hit).
    """
    if prompt_tokens <= 0:
        return 0
    cap = (prompt_tokens - 1) // engine_block_size * engine_block_size
    return min(matched // engine_block_size * engine_block_size, cap)
