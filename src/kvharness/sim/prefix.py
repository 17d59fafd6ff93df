"""A fast mirror of the replicas' prefix caches for the simulator, fed by their KV events.

It answers exactly what :meth:`kvharness.routing.index.PrefixIndex.match` answers for an index fed
with the same events (any tier counts; tested equal), with one Python int per block hash as a
bitmask of the replicas holding it: applying an event costs one dict update per block and a match
walks the prompt's blocks with one AND each, whatever the number of replicas. The simulator uses
it by default (``prefix_source="mask"``); the routing package's index is the reference, and what
the live gateway uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import accumulate, repeat
from operator import and_

from kvharness.engine.events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

__all__ = ["MaskIndex"]


class MaskIndex:
    """Block hash -> bitmask of replicas, one map per medium (device, CPU tier)."""

    __slots__ = ("_cpu", "_gpu", "num_replicas")

    def __init__(self, num_replicas: int) -> None:
        self.num_replicas = num_replicas
        self._gpu: dict[int, int] = {}
        self._cpu: dict[int, int] = {}

    def apply_all(self, replica: int, events: Iterable[KVEvent]) -> None:
        bit = 1 << replica
        for e in events:
            if isinstance(e, BlockStored):
                m = self._cpu if e.medium is not None and e.medium.upper() == "CPU" else self._gpu
                get = m.get
                m.update({h: get(h, 0) | bit for h in e.block_hashes})
            elif isinstance(e, BlockRemoved):
                m = self._cpu if e.medium is not None and e.medium.upper() == "CPU" else self._gpu
                keep = ~bit
                for h in e.block_hashes:
                    v = m.get(h, 0) & keep
                    if v:
                        m[h] = v
                    else:
                        m.pop(h, None)
            elif isinstance(e, AllBlocksCleared):
                keep = ~bit
                for m in (self._gpu, self._cpu):
                    for h in [h for h, v in m.items() if v & bit]:
                        v = m[h] & keep
                        if v:
                            m[h] = v
                        else:
                            del m[h]

    def match(self, hashes: Sequence[int]) -> list[int]:
        """Leading blocks of ``hashes`` held on each replica (device or CPU tier)."""
        out = [0] * self.num_replicas
        if not hashes:
            return out
        gpu, cpu = self._gpu, self._cpu
        if cpu:
            masks = [gpu.get(h, 0) | cpu.get(h, 0) for h in hashes]
        else:
            masks = list(map(gpu.get, hashes, repeat(0, len(hashes))))
        # Replicas holding every block so far: a running AND, numerically non-increasing, so
        # each value it takes is one contiguous run (found by count(), at C speed).
        cum = list(accumulate(masks, and_))
        n = len(cum)
        i = 0
        while i < n:
            v = cum[i]
            if not v:
                break
            j = i + cum.count(v)
            nxt = cum[j] if j < n else 0
            _set(out, v & ~nxt, j)
            i = j
        return out


def _set(out: list[int], bits: int, value: int) -> None:
    while bits:
        low = bits & -bits
        out[low.bit_length() - 1] = value
        bits ^= low
