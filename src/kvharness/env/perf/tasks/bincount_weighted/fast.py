"""Weighted bincount with numpy's own (the oracle)."""

import numpy as np


def bincount_weighted(x: np.ndarray, weights: np.ndarray, minlength: int) -> np.ndarray:
    """Sum ``weights`` into the bins given by ``x``; a new float64 array of length
    ``max(max(x) + 1, minlength)``."""
    return np.bincount(x, weights=weights, minlength=minlength).astype(np.float64, copy=False)
