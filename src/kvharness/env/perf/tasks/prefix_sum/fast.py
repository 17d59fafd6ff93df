"""Inclusive prefix sum in one numpy scan (the oracle)."""

import numpy as np


def prefix_sum(x: np.ndarray) -> np.ndarray:
    """Inclusive scan of the 1-D int64 array ``x``; a new int64 array of the same length.
    int64 addition wraps modulo 2**64, so the scan is exact whenever every partial sum fits."""
    return np.cumsum(x, dtype=np.int64)
