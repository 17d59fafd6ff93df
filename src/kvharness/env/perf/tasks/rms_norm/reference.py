"""RMS normalisation over the last axis, one element at a time: the slow, trusted reference."""

import math

import numpy as np


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Divide each row of the 2-D float64 array ``x`` (shape ``(m, n)``, ``n >= 1``) by its root
    mean square ``sqrt(sum(r ** 2) / n + eps)`` and multiply elementwise by ``weight`` (shape
    ``(n,)``). Returns a new float64 array."""
    m, n = x.shape
    w = weight.tolist()
    out = np.empty((m, n), dtype=np.float64)
    for i in range(m):
        row = x[i].tolist()
        sq = 0.0
        for v in row:
            sq += v * v
        inv = 1.0 / math.sqrt(sq / n + eps)
        for j in range(n):
            out[i, j] = row[j] * inv * w[j]
    return out
