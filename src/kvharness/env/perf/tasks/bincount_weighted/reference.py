"""Weighted bincount, one value at a time: the slow, trusted reference."""

import numpy as np


def bincount_weighted(x: np.ndarray, weights: np.ndarray, minlength: int) -> np.ndarray:
    """Sum ``weights`` (1-D float64) into bins given by ``x`` (1-D int64, non-negative, same
    length). Returns a new float64 array of length ``max(max(x) + 1, minlength)``; element ``b``
    is the sum of ``weights[i]`` over ``x[i] == b``, added in index order."""
    size = minlength
    for v in x:
        if v + 1 > size:
            size = int(v) + 1
    out = [0.0] * size
    for i in range(x.shape[0]):
        out[x[i]] += weights[i]
    return np.array(out, dtype=np.float64)
