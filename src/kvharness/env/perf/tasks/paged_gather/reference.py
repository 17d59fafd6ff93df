"""Gather a paged KV cache into contiguous per-sequence rows, one element at a time (as a
scalar translation of the gather kernel would): the slow, trusted reference."""

import numpy as np


def paged_gather(kv_cache: np.ndarray, block_table: np.ndarray, seq_lens: np.ndarray) -> np.ndarray:
    """Token ``t`` of sequence ``s`` is ``kv_cache[block_table[s, t // block_size], t %
    block_size]`` for ``t < seq_lens[s]``. Returns a new float32 array ``[num_seqs, max_len,
    head_dim]`` (``max_len = max(seq_lens)``, 0 without sequences), zero past each length."""
    _, block_size, head_dim = kv_cache.shape
    num_seqs = seq_lens.shape[0]
    max_len = int(seq_lens.max()) if num_seqs else 0
    out = np.zeros((num_seqs, max_len, head_dim), dtype=np.float32)
    for s in range(num_seqs):
        for t in range(int(seq_lens[s])):
            block = block_table[s, t // block_size]
            slot = t % block_size
            for d in range(head_dim):
                out[s, t, d] = kv_cache[block, slot, d]
    return out
