"""Segment sum over CSR offsets, one element at a time: the slow, trusted reference."""

import numpy as np


def segment_sum(src: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Row ``s`` of the result is the sum of ``src[indptr[s] : indptr[s + 1]]`` (float64 rows of
    ``src`` ``[N, F]``; ``indptr`` int64 ``[S + 1]``, non-decreasing, from 0 to ``N``), zeros for
    an empty segment, rows added in order. Returns a new float64 array ``[S, F]``."""
    segments = indptr.shape[0] - 1
    features = src.shape[1]
    out = np.zeros((segments, features), dtype=np.float64)
    for s in range(segments):
        for r in range(indptr[s], indptr[s + 1]):
            for f in range(features):
                out[s, f] += src[r, f]
    return out
