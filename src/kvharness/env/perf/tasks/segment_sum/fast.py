"""Segment sum with one ``numpy.add.reduceat`` (the oracle)."""

import numpy as np


def segment_sum(src: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Row ``s`` is the sum of ``src[indptr[s] : indptr[s + 1]]``, zeros for an empty segment;
    a new float64 array ``[S, F]``."""
    segments = indptr.shape[0] - 1
    out = np.zeros((segments, src.shape[1]), dtype=np.float64)
    starts = indptr[:-1]
    nonempty = indptr[1:] > starts
    if not nonempty.any():
        return out
    # reduceat sums from each start to the next start given, so give it only the non-empty
    # segments' starts: the rows between a segment's end and the next start given are exactly
    # the empty segments' (none).
    out[nonempty] = np.add.reduceat(src, starts[nonempty], axis=0)
    return out
