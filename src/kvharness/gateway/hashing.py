"""The gateway's block hashes: chained over token ids at the engines' block size.

Block ``i`` of a prompt is named by ``block_hash(name of block i-1, token ids of block i)`` with
block -1 named :data:`ROOT_HASH`; only full blocks are named (an engine caches only those). The
function is the one :class:`kvharness.workload.chain.ChainBuilder` uses for real token ids
(keyed blake2b over little-endian uint32 ids), so a workload's chain built from token ids at the
engine's block size and the gateway's hashes of the same prompt agree.

Engines hash with their own function and seed (vLLM: sha256 over its own serialisation, seeded by
``PYTHONHASHSEED``). The gateway does not reproduce that: KV events carry each stored block's
token ids, so :class:`kvharness.gateway.kv_events.HashTranslator` renames engine hashes to these.
That keeps routing right whatever hash algorithm, seed or vLLM version a replica runs.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Sequence

__all__ = ["ROOT_HASH", "ByteChainHasher", "block_hash", "byte_chain_hashes", "chain_hashes"]

ROOT_HASH = 0
"""The parent name of a prompt's first block."""

_FAST = array("I").itemsize == 4 and sys.byteorder == "little"


def _token_bytes(token_ids: Sequence[int]) -> bytes:
    if _FAST:
        return array("I", token_ids).tobytes()
    return b"".join(int(t).to_bytes(4, "little") for t in token_ids)


def block_hash(parent: int, token_ids: Sequence[int]) -> int:
    """The name of a block of ``token_ids`` following the block named ``parent`` (a 64-bit int)."""
    key = (parent & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
    digest = hashlib.blake2b(_token_bytes(token_ids), digest_size=8, key=key).digest()
    return int.from_bytes(digest, "little")


def chain_hashes(
    token_ids: Sequence[int], block_size: int, parent: int = ROOT_HASH, start: int = 0
) -> list[int]:
    """Names of the full blocks of ``token_ids[start:]``, the first following ``parent``.

    ``start`` must be a multiple of ``block_size`` (it is where an earlier, reused chain ended).
    Costs one blake2b per block; does not mutate its arguments.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if start % block_size:
        raise ValueError(f"start {start} is not a multiple of block_size {block_size}")
    stop = len(token_ids) - (len(token_ids) - start) % block_size
    data = memoryview(_token_bytes(token_ids[start:stop]))
    width = 4 * block_size
    out = []
    blake2b = hashlib.blake2b
    for pos in range(0, len(data), width):
        key = parent.to_bytes(8, "little")
        parent = int.from_bytes(
            blake2b(data[pos : pos + width], digest_size=8, key=key).digest(), "little"
        )
        out.append(parent)
    return out


def byte_chain_hashes(data: bytes, bytes_per_block: int) -> list[int]:
    """Chained names of the full ``bytes_per_block`` chunks of ``data``.

    For routing without the engine's tokenizer (about 4 bytes a token): such names never match KV
    events, so they only serve an index fed by the router's own decisions.
    """
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
        key = (self._parent | 1 << 63).to_bytes(8, "little")  # never equal to a token chain's key
        self._parent = int.from_bytes(
            hashlib.blake2b(chunk, digest_size=8, key=key).digest(), "little"
        )
        self.hashes.append(self._parent)
