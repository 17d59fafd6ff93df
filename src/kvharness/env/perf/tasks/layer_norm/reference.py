"""Layer normalisation over the last axis, one element at a time: the slow, trusted reference."""

import math

import numpy as np


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Normalise each row of the 2-D float64 array ``x`` (shape ``(m, n)``, ``n >= 1``) to zero
    mean and unit biased variance, then scale by ``gamma`` and shift by ``beta`` (both shape
    ``(n,)``): ``(r - mean) / sqrt(var + eps) * gamma + beta``. Returns a new float64 array."""
    m, n = x.shape
    g = gamma.tolist()
    b = beta.tolist()
    out = np.empty((m, n), dtype=np.float64)
    for i in range(m):
        row = x[i].tolist()
        total = 0.0
        for v in row:
            total += v
        mean = total / n
        sq = 0.0
        for v in row:
            sq += (v - mean) * (v - mean)
        inv = 1.0 / math.sqrt(sq / n + eps)
        for j in range(n):
            out[i, j] = (row[j] - mean) * inv * g[j] + b[j]
    return out
