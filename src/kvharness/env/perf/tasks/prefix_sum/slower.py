"""Inclusive prefix sum scanned in short chunks: numpy within a chunk, Python across chunks."""

import numpy as np

_CHUNK = 128


def prefix_sum(x: np.ndarray) -> np.ndarray:
    """Inclusive scan of the 1-D int64 array ``x``; a new int64 array of the same length."""
    out = np.empty(x.shape[0], dtype=np.int64)
    carry = np.int64(0)
    for start in range(0, x.shape[0], _CHUNK):
        part = np.cumsum(x[start : start + _CHUNK], dtype=np.int64)
        part += carry
        out[start : start + _CHUNK] = part
        carry = part[-1]
    return out
