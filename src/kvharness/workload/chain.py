"""Block chains: a prompt as fixed-size token blocks named by chained hashes.

A :class:`BlockChain` of ``num_tokens`` tokens at ``block_size`` holds one hash per block,
``ceil(num_tokens / block_size)`` of them; every block but the last is full, the last may be a
partial tail. A block's hash names the *whole prefix* up to and including that block (it is chained
over its parent), so two chains share a prefix exactly as far as their hashes agree.

Materialisation turns a hash into ``block_size`` token ids, deterministically: equal hashes give equal
tokens, and a partial tail of ``n`` tokens is the first ``n`` tokens of its hash's block. A tail whose
hash later reappears as a full block therefore materialises as a true prefix of it.

Chains are built by :class:`ChainBuilder` from real token ids or from synthetic *segments* (a seed
and a length, standing for tokens the generator never spells out); both hash the same way.

The block hash. Block ``i`` is named by :func:`block_hash` (name of block ``i - 1``, its content):
blake2b keyed by the parent's 64-bit name, over the block's token ids as little-endian uint32
(a segment's content is its seed and span instead), with :data:`ROOT_HASH` the parent of block 0.
This is the one definition: the gateway names a live prompt's blocks with :func:`chain_hashes`,
so a workload's chain built from token ids at the engine's block size and the gateway's hashes of
the same prompt agree.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

__all__ = [
    "ROOT_HASH",
    "BlockChain",
    "ChainBuilder",
    "block_hash",
    "block_tokens",
    "chain_hashes",
    "common_prefix_len",
    "default_words",
    "digest",
    "materialise",
    "materialise_text",
    "materialise_words",
    "shared_prefix_tokens",
    "token_bytes",
]

_MASK64 = (1 << 64) - 1
ROOT_HASH = 0
"""The parent name of a prompt's first block."""

_FAST = array("I").itemsize == 4 and sys.byteorder == "little"


def digest(parent: int, payload: bytes | memoryview) -> int:
    """The chained name of ``payload`` following the block named ``parent`` (64-bit ints)."""
    key = (parent & _MASK64).to_bytes(8, "little")
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8, key=key).digest(), "little")


def token_bytes(token_ids: Sequence[int]) -> bytes:
    """Token ids as the bytes a block's hash covers (little-endian uint32)."""
    if _FAST:
        return array("I", token_ids).tobytes()
    return b"".join(int(t).to_bytes(4, "little") for t in token_ids)


def block_hash(parent: int, token_ids: Sequence[int]) -> int:
    """The name of a block of ``token_ids`` following the block named ``parent``."""
    return digest(parent, token_bytes(token_ids))


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
    data = memoryview(token_bytes(token_ids[start:stop]))
    width = 4 * block_size
    out = []
    for pos in range(0, len(data), width):
        parent = digest(parent, data[pos : pos + width])
        out.append(parent)
    return out


_Seq = TypeVar("_Seq", str, bytes, Sequence[int], Sequence[bytes])


def common_prefix_len(a: _Seq, b: _Seq) -> int:
    """Length of the longest common prefix of two strings or sequences (O(n log n) slice
    comparisons, which run in C, rather than a Python step per item)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    while lo < hi and a[lo] == b[lo]:
        lo += 1
    return lo


@dataclass(frozen=True, slots=True)
class BlockChain:
    """A prompt of ``num_tokens`` tokens as chained block hashes (see module docstring).

    Invariant: ``len(hashes) == ceil(num_tokens / block_size)``.
    """

    block_size: int
    hashes: tuple[int, ...]
    num_tokens: int

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if self.num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {self.num_tokens}")
        expected = -(-self.num_tokens // self.block_size)
        if len(self.hashes) != expected:
            raise ValueError(
                f"{self.num_tokens} tokens at block size {self.block_size} need {expected} "
                f"block hashes, got {len(self.hashes)}"
            )

    @property
    def num_full_blocks(self) -> int:
        return self.num_tokens // self.block_size

    @property
    def full_hashes(self) -> tuple[int, ...]:
        """Hashes of the full blocks only (what a prefix cache can store)."""
        return self.hashes[: self.num_full_blocks]

    @property
    def tail_tokens(self) -> int:
        """Tokens in the partial last block (0 when the chain ends on a block boundary)."""
        return self.num_tokens % self.block_size

    def block_len(self, i: int) -> int:
        """Number of tokens in block ``i``."""
        if i < self.num_full_blocks:
            return self.block_size
        return self.tail_tokens

    def rechunk(self, block_size: int) -> tuple[int, ...]:
        """Hashes of the *full* blocks of this prompt cut at another ``block_size`` (an engine's).

        Block ``j`` of the new cut ends at token ``t = (j + 1) * block_size - 1``; since our hashes
        name whole prefixes, the prefix up to ``t`` is named by (hash of the block holding ``t``,
        offset of ``t`` in it). Two chains agree on a rechunked block exactly when their token
        prefixes agree up to it. Costs O(num_tokens / block_size).
        """
        if block_size == self.block_size:
            return self.full_hashes
        out: list[int] = []
        src = self.block_size
        for j in range(self.num_tokens // block_size):
            t = (j + 1) * block_size - 1
            h = self.hashes[t // src]
            out.append(digest(h, (t % src).to_bytes(4, "little")))
        return tuple(out)

    def __len__(self) -> int:
        return self.num_tokens


def shared_prefix_tokens(a: BlockChain, b: BlockChain) -> int:
    """Tokens two chains of the same block size have in common as a prefix (block-exact)."""
    n = 0
    for i, (ha, hb) in enumerate(zip(a.hashes, b.hashes, strict=False)):
        if ha != hb:
            break
        la, lb = a.block_len(i), b.block_len(i)
        n += min(la, lb)
        if la != lb:
            break
    return n


@dataclass(slots=True)
class ChainBuilder:
    """Builds a growing prompt's chain incrementally; appends cost O(appended tokens / block).

    ``extend_tokens`` takes real token ids; ``extend_segment`` takes a synthetic stretch of
    ``n`` tokens named by ``seed`` (its token ids are never spelled out); ``extend_image`` takes an
    image's ``n`` placeholder tokens, named by its content hash. All feed the same chained hash, so
    the chain is a pure function of the content appended. :meth:`chain` snapshots the current
    state without consuming it.
    """

    block_size: int
    _hashes: list[int] = field(default_factory=list)
    _parent: int = 0
    _num_tokens: int = 0
    # Content of the open (partial) block, as the bytes that will be hashed once it is complete.
    _open: bytearray = field(default_factory=bytearray)
    _open_len: int = 0

    def extend_tokens(self, token_ids: Iterable[int]) -> None:
        ids = list(token_ids)
        pos = 0
        while pos < len(ids):
            take = min(self.block_size - self._open_len, len(ids) - pos)
            self._open += token_bytes(ids[pos : pos + take])
            self._advance(take)
            pos += take

    def extend_segment(self, seed: int, n: int) -> None:
        self._extend_named(b"S", seed, n)

    def extend_image(self, content_hash: int, n: int) -> None:
        """An image's ``n`` placeholder tokens: every block they touch is named by the image's
        content hash (and which of its tokens it holds), as vLLM's prefix cache mixes an image's
        hash into those blocks' hashes. See :mod:`kvharness.workload.images`."""
        self._extend_named(b"I", content_hash, n)

    def _extend_named(self, kind: bytes, name: int, n: int) -> None:
        if n < 0:
            raise ValueError(f"segment length must be >= 0, got {n}")
        offset = 0
        while offset < n:
            take = min(self.block_size - self._open_len, n - offset)
            self._open += kind + (name & _MASK64).to_bytes(8, "little")
            self._open += offset.to_bytes(4, "little") + take.to_bytes(4, "little")
            self._advance(take)
            offset += take

    def _advance(self, take: int) -> None:
        self._open_len += take
        self._num_tokens += take
        if self._open_len == self.block_size:
            self._parent = digest(self._parent, bytes(self._open))
            self._hashes.append(self._parent)
            self._open.clear()
            self._open_len = 0

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    def chain(self) -> BlockChain:
        hashes = self._hashes
        if self._open_len:
            # The open block's hash names its content so far; extending it later yields a
            # different hash for the (then longer) block, as the prefix then differs in length.
            hashes = [*hashes, digest(self._parent, bytes(self._open))]
        return BlockChain(self.block_size, tuple(hashes), self._num_tokens)


def _splitmix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def block_tokens(
    block_hash: int, block_size: int, vocab_size: int, low: int = 0
) -> npt.NDArray[np.int64]:
    """The ``block_size`` token ids of a block, drawn from ``[low, vocab_size)`` by its hash."""
    if not 0 <= low < vocab_size:
        raise ValueError(f"need 0 <= low < vocab_size, got low={low}, vocab_size={vocab_size}")
    base = np.uint64((block_hash * 0x100000001B3) & _MASK64)
    with np.errstate(over="ignore"):
        mixed = _splitmix64(np.arange(block_size, dtype=np.uint64) + base)
    span = np.uint64(vocab_size - low)
    return (mixed % span).astype(np.int64) + low


def materialise(chain: BlockChain, vocab_size: int, low: int = 0) -> list[int]:
    """Token ids for a whole chain: equal hashes give equal ids, tails are prefixes of blocks."""
    parts = []
    for i, h in enumerate(chain.hashes):
        toks = block_tokens(h, chain.block_size, vocab_size, low)
        parts.append(toks[: chain.block_len(i)])
    if not parts:
        return []
    out: list[int] = np.concatenate(parts).tolist()
    return out


def _word_list() -> tuple[str, ...]:
    consonants = "bcdfghjklmnprstvz"
    vowels = "aeiou"
    words = [c1 + v + c2 for c1 in consonants for v in vowels for c2 in consonants]
    return tuple(words)


_WORDS = _word_list()


def materialise_text(chain: BlockChain, words: Sequence[str] = _WORDS) -> str:
    """A chain as text: each materialised token becomes one word of ``words``, space-separated.

    Equal chains give equal text and a chain's text extends its prefix's text, so a text-only
    server sees the same prefix reuse; the exact token count depends on the server's tokenizer.
    """
    ids = materialise(chain, len(words))
    return " ".join(words[i] for i in ids)


def default_words() -> tuple[str, ...]:
    """The built-in word list of :func:`materialise_text` (consonant-vowel-consonant words)."""
    return _WORDS


def materialise_words(chain: BlockChain, words: Sequence[str] = _WORDS) -> str:
    """A chain as text, one word of ``words`` per materialised token, *each preceded by a space*
    (``"".join(" " + w ...)``): the text of a prefix chain is an exact string prefix of the longer
    chain's text, and with words that are one token each in a tokenizer (see
    :mod:`kvharness.bench.words`) it tokenises to exactly ``chain.num_tokens`` tokens.
    """
    ids = materialise(chain, len(words))
    return "".join(" " + words[i] for i in ids)
