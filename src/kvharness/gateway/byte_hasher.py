"""Prompts hashed without the engines' tokenizer: by their bytes, about four a token.

Such names never match KV events, so they only serve an index fed by the router's own decisions
(sessions still stick, shared prefixes still meet). A long text is hashed a slice at a time, so
each C call that holds the interpreter's lock stays short and the event loop keeps running beside
the hashing thread.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvharness.gateway.prompt_hasher import HashedPrompt
from kvharness.workload.chain import ROOT_HASH, digest

__all__ = ["BYTES_PER_TOKEN", "ByteChainHasher", "approximate", "byte_chain_hashes"]

BYTES_PER_TOKEN = 4
_TEXT_SLICE = 1024 * 1024
"""Characters of a prompt encoded at once."""


_BYTES_KEY = 1 << 63
"""Set in the parent key of byte-chain blocks, so no byte chain's name equals a token chain's."""


def byte_chain_hashes(data: bytes, bytes_per_block: int) -> list[int]:
    """Chained names of the full ``bytes_per_block`` chunks of ``data``."""
    hasher = ByteChainHasher(bytes_per_block)
    hasher.feed(data)
    return hasher.hashes


class ByteChainHasher:
    """:func:`byte_chain_hashes` over data given in pieces: after feeding pieces whose
    concatenation is ``data``, :attr:`hashes` equals ``byte_chain_hashes(data, bytes_per_block)``
    cut to its first ``max_blocks`` (None: all), and :attr:`size` is ``len(data)``. Holds at most
    one partial block besides the hashes; past ``max_blocks`` it only counts bytes."""

    def __init__(self, bytes_per_block: int, max_blocks: int | None = None) -> None:
        if bytes_per_block <= 0:
            raise ValueError(f"bytes_per_block must be positive, got {bytes_per_block}")
        self.bytes_per_block = bytes_per_block
        self.max_blocks = max_blocks
        self.hashes: list[int] = []
        self.size = 0
        self._parent = ROOT_HASH
        self._rest = b""

    def feed(self, data: bytes) -> None:
        """Hash the blocks ``data`` completes; keep its partial tail for the next piece."""
        self.size += len(data)
        if self.full:
            return
        width = self.bytes_per_block
        if self._rest:
            need = width - len(self._rest)
            if len(data) < need:
                self._rest += data
                return
            self._block(self._rest + data[:need])
            data = data[need:]
            self._rest = b""
            if self.full:
                return
        view = memoryview(data)
        end = len(data) - len(data) % width
        if self.max_blocks is not None:
            end = min(end, (self.max_blocks - len(self.hashes)) * width)
        for pos in range(0, end, width):
            self._block(view[pos : pos + width])
        self._rest = b"" if self.full else bytes(view[end:])

    @property
    def full(self) -> bool:
        """Whether ``max_blocks`` blocks are hashed (further bytes are only counted)."""
        return self.max_blocks is not None and len(self.hashes) >= self.max_blocks

    def _block(self, chunk: bytes | memoryview) -> None:
        self._parent = digest(self._parent | _BYTES_KEY, chunk)
        self.hashes.append(self._parent)


def approximate(pieces: Iterable[str], block_size: int, max_blocks: int) -> HashedPrompt:
    """A prompt given as text ``pieces``, hashed by its bytes in blocks of ``block_size`` tokens
    (its first ``max_blocks`` blocks; its token count estimated from its length)."""
    chain = ByteChainHasher(BYTES_PER_TOKEN * block_size, max_blocks=max_blocks)
    for piece in pieces:
        for at in range(0, len(piece), _TEXT_SLICE):
            chain.feed(piece[at : at + _TEXT_SLICE].encode())
    return HashedPrompt(tuple(chain.hashes), chain.size // BYTES_PER_TOKEN, (), 0)
