"""Pairwise Euclidean distances, still one pair at a time but through ``math.dist``."""

import math

import numpy as np


def cdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distance between every row of ``a`` and every row of ``b``; a new float64
    array ``[m, n]``."""
    rows_b = b.tolist()
    out = np.zeros((a.shape[0], b.shape[0]), dtype=np.float64)
    for i, p in enumerate(a.tolist()):
        out[i] = [math.dist(p, q) for q in rows_b]
    return out
