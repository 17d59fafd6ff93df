"""Gather a paged KV cache a whole block at a time with one fancy-indexing gather (the oracle)."""

import numpy as np


def paged_gather(kv_cache: np.ndarray, block_table: np.ndarray, seq_lens: np.ndarray) -> np.ndarray:
    """Each sequence's tokens, through its block table, as a new float32 array ``[num_seqs,
    max_len, head_dim]``, zero past each sequence's length."""
    _, block_size, head_dim = kv_cache.shape
    num_seqs = seq_lens.shape[0]
    max_len = int(seq_lens.max()) if num_seqs else 0
    if max_len == 0:
        return np.zeros((num_seqs, 0, head_dim), dtype=np.float32)
    width = -(-max_len // block_size)
    used = np.arange(width)[None, :] * block_size < seq_lens[:, None]
    blocks = np.where(used, block_table[:, :width], 0)  # padding entries read block 0
    out = kv_cache[blocks].reshape(num_seqs, width * block_size, head_dim)[:, :max_len]
    out = np.ascontiguousarray(out)
    out[np.arange(max_len)[None, :] >= seq_lens[:, None]] = 0.0
    return out
