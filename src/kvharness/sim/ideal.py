"""The ideal cache, fast for growing sessions: the same answers as
:class:`kvharness.workload.ideal.IdealCache`, at O(new blocks) per turn instead of O(all blocks).

A session's turn usually extends its previous turn's prompt. Every *full* block of the previous
prompt is in the ideal cache at full length, so the part shared with it (found by comparing hash
tuples, at C speed) needs no lookup; only the blocks after it are looked up and inserted.
"""

from __future__ import annotations

from kvharness.workload.chain import BlockChain
from kvharness.workload.ideal import IdealHit

__all__ = ["SessionIdealCache"]


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class SessionIdealCache:
    """An infinite prefix cache over chains of one block size, visited per session."""

    __slots__ = ("_last", "_seen")

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}  # block hash -> most tokens of it ever cached
        self._last: dict[str, BlockChain] = {}

    def visit(self, session: str | None, chain: BlockChain) -> IdealHit:
        """Look ``chain`` up, then cache it; ``session`` names whose previous prompt it extends."""
        seen = self._seen
        hashes = chain.hashes
        start = 0
        prev = self._last.get(session) if session is not None else None
        if prev is not None:
            k = min(prev.num_full_blocks, chain.num_full_blocks)
            # Usually the previous prompt's full blocks are a prefix of this one: one comparison.
            start = k if prev.hashes[:k] == hashes[:k] else _common_prefix(prev.hashes[:k], hashes)
        bs = chain.block_size
        tokens = start * bs
        blocks = start
        full = chain.num_full_blocks
        n = len(hashes)
        i = start
        while i < n:
            have = seen.get(hashes[i])
            if have is None:
                break
            need = bs if i < full else chain.tail_tokens
            blocks += 1
            tokens += min(have, need)
            if have < need:
                break
            i += 1
        for j in range(start, n):
            h = hashes[j]
            m = bs if j < full else chain.tail_tokens
            if seen.get(h, -1) < m:
                seen[h] = m
        if session is not None:
            self._last[session] = chain
        return IdealHit(tokens, blocks)
