"""Pairwise Euclidean distances, one coordinate at a time: the slow, trusted reference."""

import math

import numpy as np


def cdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distance between every row of ``a`` (float64 ``[m, d]``) and every row of ``b``
    (float64 ``[n, d]``). Returns a new float64 array ``[m, n]``."""
    rows_a = a.tolist()
    rows_b = b.tolist()
    out = np.zeros((len(rows_a), len(rows_b)), dtype=np.float64)
    for i, p in enumerate(rows_a):
        for j, q in enumerate(rows_b):
            total = 0.0
            for k in range(len(p)):
                diff = p[k] - q[k]
                total += diff * diff
            out[i, j] = math.sqrt(total)
    return out
