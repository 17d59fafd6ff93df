"""Top-k of all rows at once: a partition, a fix-up of ties at the k-th place, then a sort of
only the k survivors (the oracle)."""

import numpy as np


def top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest values of each row of ``x`` (descending, ties by lower column) and
    their column indices, as float64 and int64 arrays of shape ``(m, k)``."""
    m, n = x.shape
    if k == 0 or m == 0:
        return np.zeros((m, k), dtype=np.float64), np.zeros((m, k), dtype=np.int64)
    neg = -x
    neg += 0.0  # -0.0 + 0.0 == 0.0: both zeros become one key, as they compare equal
    if k < n:
        # Everything strictly above the k-th largest value is in; of the values equal to it,
        # the lowest columns fill the remaining places.
        kth = np.partition(neg, k - 1, axis=1)[:, k - 1 : k]
        above = neg < kth
        tied = neg == kth
        room = k - above.sum(axis=1, keepdims=True)
        keep = above | (tied & (np.cumsum(tied, axis=1) <= room))
        cols = np.nonzero(keep)[1].reshape(m, k)  # ascending columns in each row
        order = np.argsort(np.take_along_axis(neg, cols, axis=1), axis=1, kind="stable")
        indices = np.take_along_axis(cols, order, axis=1)
    else:
        indices = np.argsort(neg, axis=1, kind="stable")
    return np.take_along_axis(x, indices, axis=1), indices.astype(np.int64)
