"""Top-k per row with Python's sort, on plain floats rather than numpy scalars."""

import numpy as np


def top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest values of each row of ``x`` (descending, ties by lower column) and
    their column indices, as float64 and int64 arrays of shape ``(m, k)``."""
    m, n = x.shape
    values = np.zeros((m, k), dtype=np.float64)
    indices = np.zeros((m, k), dtype=np.int64)
    for i in range(m):
        row = x[i].tolist()
        # sorted() is stable: equal values keep their column order.
        order = sorted(range(n), key=lambda j: -row[j])[:k]
        indices[i] = order
        values[i] = [row[j] for j in order]
    return values, indices
