"""Top-k per row by sorting each row's columns in Python: the slow, trusted reference."""

import numpy as np


def top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest values of each row of the 2-D float64 array ``x``, in descending order,
    ties broken by the lower column index, and their column indices. Returns ``(values,
    indices)``: float64 and int64 arrays of shape ``(m, k)``; ``x`` is not modified."""
    m = x.shape[0]
    values = np.zeros((m, k), dtype=np.float64)
    indices = np.zeros((m, k), dtype=np.int64)
    for i in range(m):
        row = x[i]
        order = sorted(range(x.shape[1]), key=lambda j: (-row[j], j))
        for r in range(k):
            indices[i, r] = order[r]
            values[i, r] = row[order[r]]
    return values, indices
