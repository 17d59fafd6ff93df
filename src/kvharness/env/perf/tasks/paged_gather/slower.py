"""Gather a paged KV cache one token at a time (a row copy per token)."""

import numpy as np


def paged_gather(kv_cache: np.ndarray, block_table: np.ndarray, seq_lens: np.ndarray) -> np.ndarray:
    """Each sequence's tokens, through its block table, as a new float32 array ``[num_seqs,
    max_len, head_dim]``, zero past each sequence's length."""
    _, block_size, head_dim = kv_cache.shape
    num_seqs = seq_lens.shape[0]
    max_len = int(seq_lens.max()) if num_seqs else 0
    out = np.zeros((num_seqs, max_len, head_dim), dtype=np.float32)
    for s in range(num_seqs):
        for t in range(int(seq_lens[s])):
            out[s, t] = kv_cache[block_table[s, t // block_size], t % block_size]
    return out
