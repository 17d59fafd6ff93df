"""Shared-prefix (cascade) decode attention: how many KV tokens a decode batch really reads.

A paged decode kernel reads each sequence's whole context, so a prefix that ``n`` running sequences
share (the same physical blocks: the prefix cache hands one cached block to every request whose
chain matches it) is read ``n`` times a step. A cascade kernel (FlashInfer's cascade attention,
Hydragen) attends all the queries that share a prefix to it in one pass, reading it once, then
each sequence's own suffix, and merges the two partial results. Per decode step::

    kv_read = decode_ctx - block_size * sum over blocks b of (n_b - 1) + merge_tokens * sharers

where ``n_b`` is the number of decode sequences in the batch holding block ``b`` and ``sharers``
the sequences that hold at least one block another holds. The engine uses the cascade kernel only
when this is below ``decode_ctx`` (else the batch is planned as paged, exactly as by default).

Physical constants and what they stand for:

* Sharing is by whole blocks (``block_size`` tokens): only full, computed, cached blocks are ever
  shared, so a common prefix shorter than one block, or the partial last block of any prefix,
  saves nothing.
* ``merge_tokens`` (:func:`merge_tokens`): a sequence on the cascade path writes the shared
  pass's partial attention state (fp32 output + log-sum-exp per query head per layer) and the
  merge reads it back with the suffix pass's: about three fp32 states of
  ``heads x (head_dim + 1)`` per layer, charged as the KV tokens of the same size. With GQA
  (8 KV heads for 64 query heads) this is ~25 tokens for Llama-3.3-70B, so a prefix must be
  shared by more than ~25 tokens per sequence before cascade pays.
* One merge per sharing sequence: an ideal multi-level cascade (each distinct block read once)
  with a two-level kernel's merge cost; extra levels' merges are not charged. The extra kernel
  launches of the shared pass and the merge are not modelled either (see
  ``benchmarks/cascade_attention.py`` for where that shows: small batches, short prefixes).

**Costs.** :class:`SharedBlocks` counts references among the batch's decode sequences. A sequence
joins once, when it starts decoding (O(its prompt blocks)), and leaves when it finishes or is
preempted (the same); a step then reads the totals in O(1). Only prompt blocks can be shared
(decode blocks are never cached), and a decoding sequence's prompt blocks do not change, so the
counts stay exact between joins and leaves.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from itertools import repeat
from operator import sub

from kvharness.engine.cost import Deployment
from kvharness.engine.request import Request

__all__ = ["ATTENTIONS", "SharedBlocks", "merge_tokens"]

ATTENTIONS = {
    "default": "paged decode attention: every sequence reads its whole context (vLLM's default)",
    "cascade": "shared-prefix (cascade) decode attention: blocks that several decoding sequences "
    "share are read once per step (FlashInfer cascade, Hydragen)",
}
"""Decode attention kernels by name, with what each reads."""

MERGE_STATES = 3
"""fp32 partial attention states moved per sequence per layer on the cascade path: the shared
pass writes one, the merge reads it and the suffix pass's."""


def merge_tokens(dep: Deployment) -> int:
    """KV tokens of the same size as one sequence's merge traffic (see the module docstring)."""
    m = dep.model
    state = m.heads * (m.head_dim + 1) * 4.0 * m.layers  # fp32 output + log-sum-exp
    return math.ceil(MERGE_STATES * state / dep.kv_bytes_per_token)


class SharedBlocks:
    """Reference counts of prompt blocks among a set of decoding requests, and the totals a step
    needs. Mutated by :meth:`add` / :meth:`discard`; the totals are always current.

    * :attr:`duplicates`: sum over blocks of (holders - 1): the block reads a cascade kernel saves.
    * :attr:`shared_reads`: sum over blocks held by 2+ of their holders: the shared-block reads of
      a paged kernel (a cascade kernel does ``shared_reads - duplicates`` of them).
    * :attr:`sharers`: requests holding at least one block another holds. A hit is always a
      leading run of a chain, so these are the requests whose first block has 2+ holders.

    Counts are kept as two counters (references taken, references dropped) so that joining and
    leaving run at C speed, without a Python loop over the blocks.
    """

    __slots__ = ("_distinct", "_firsts", "_held", "_in", "_out", "_single", "_total", "sharers")

    def __init__(self, reqs: Iterable[Request] = ()) -> None:
        self._held: dict[Request, list[int]] = {}
        self._in: Counter[int] = Counter()
        self._out: Counter[int] = Counter()
        self._firsts: dict[int, int] = {}
        self._total = 0
        """Block references held, all requests together."""
        self._distinct = 0
        """Blocks with at least one holder."""
        self._single = 0
        """Blocks with exactly one holder."""
        self.sharers = 0
        for r in reqs:
            self.add(r)

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, req: Request) -> bool:
        return req in self._held

    @property
    def duplicates(self) -> int:
        return self._total - self._distinct

    @property
    def shared_reads(self) -> int:
        return self._total - self._single

    def _holders(self, blocks: list[int]) -> list[int]:
        zeros = repeat(0)
        return list(map(sub, map(self._in.get, blocks, zeros), map(self._out.get, blocks, zeros)))

    def add(self, req: Request) -> None:
        """Count ``req``'s prompt blocks (those named in the prefix cache: the shareable ones)."""
        blocks = req.blocks[: req.num_hashed]
        self._held[req] = blocks
        if not blocks:
            return
        now = self._holders(blocks)
        new = now.count(0)
        self._single += new - now.count(1)
        self._distinct += new
        self._total += len(blocks)
        self._in.update(blocks)
        first = self._firsts[blocks[0]] = self._firsts.get(blocks[0], 0) + 1
        if first >= 2:
            self.sharers += 2 if first == 2 else 1

    def discard(self, req: Request) -> None:
        """Stop counting ``req`` (no-op when it is not counted)."""
        blocks = self._held.pop(req, None)
        if not blocks:
            return
        now = self._holders(blocks)
        gone = now.count(1)
        self._single += now.count(2) - gone
        self._distinct -= gone
        self._total -= len(blocks)
        self._out.update(blocks)
        f = blocks[0]
        first = self._firsts[f]
        if first >= 2:
            self.sharers -= 2 if first == 2 else 1
        if first == 1:
            del self._firsts[f]
        else:
            self._firsts[f] = first - 1
