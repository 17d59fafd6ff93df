"""Pairwise Euclidean distances through one matrix product (the oracle)."""

import numpy as np


def cdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distance between every row of ``a`` and every row of ``b``; a new float64
    array ``[m, n]``. Uses ``|a|² + |b|² - 2 a·b``, clamped at 0 against rounding."""
    sq = a @ b.T
    sq *= -2.0
    sq += np.einsum("ij,ij->i", a, a)[:, None]
    sq += np.einsum("ij,ij->i", b, b)[None, :]
    np.maximum(sq, 0.0, out=sq)
    return np.sqrt(sq, out=sq)
