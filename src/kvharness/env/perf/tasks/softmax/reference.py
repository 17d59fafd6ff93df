"""Row-wise softmax, one element at a time: the slow, trusted reference."""

import math

import numpy as np


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax of each row of the 2-D float64 array ``x`` (shape ``(m, n)``): row ``i`` of the
    result is ``exp(x[i] - max(x[i])) / sum(exp(x[i] - max(x[i])))``. Returns a new float64
    array of the same shape; ``x`` is not modified."""
    out = np.zeros(x.shape, dtype=np.float64)
    for i in range(x.shape[0]):
        row = x[i].tolist()
        if not row:
            continue
        top = row[0]
        for v in row:
            if v > top:
                top = v
        exps = [math.exp(v - top) for v in row]
        total = 0.0
        for e in exps:
            total += e
        for j, e in enumerate(exps):
            out[i, j] = e / total
    return out
