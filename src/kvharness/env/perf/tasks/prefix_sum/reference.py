"""Inclusive prefix sum of an int64 array, one element at a time: the slow, trusted reference."""

import numpy as np


def prefix_sum(x: np.ndarray) -> np.ndarray:
    """Inclusive scan of the 1-D int64 array ``x``: element ``i`` of the result is
    ``x[0] + ... + x[i]``. Exact (Python integers); the caller guarantees every partial sum fits
    in int64. Returns a new int64 array of the same length."""
    out = []
    total = 0
    for v in x.tolist():
        total += v
        out.append(total)
    return np.array(out, dtype=np.int64)
