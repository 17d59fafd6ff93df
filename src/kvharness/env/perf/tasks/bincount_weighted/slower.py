"""Weighted bincount by sorting the values into runs of equal bins and summing each run."""

from itertools import pairwise

import numpy as np


def bincount_weighted(x: np.ndarray, weights: np.ndarray, minlength: int) -> np.ndarray:
    """Sum ``weights`` into the bins given by ``x``; a new float64 array of length
    ``max(max(x) + 1, minlength)``."""
    size = max(int(x.max()) + 1, minlength) if x.shape[0] else minlength
    out = np.zeros(size, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    sorted_bins = x[order]
    sorted_weights = weights[order]
    bounds = np.append(np.flatnonzero(np.diff(sorted_bins, prepend=-1)), x.shape[0]).tolist()
    for start, end in pairwise(bounds):
        out[sorted_bins[start]] = sorted_weights[start:end].sum()
    return out
