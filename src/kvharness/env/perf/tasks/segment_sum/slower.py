"""Segment sum in pure Python on lists: each feature column of a segment summed with the
built-in ``sum``."""

import numpy as np


def segment_sum(src: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Row ``s`` is the sum of ``src[indptr[s] : indptr[s + 1]]``, zeros for an empty segment;
    a new float64 array ``[S, F]``."""
    rows = src.tolist()
    offsets = indptr.tolist()
    out = np.zeros((len(offsets) - 1, src.shape[1]), dtype=np.float64)
    for s in range(len(offsets) - 1):
        segment = rows[offsets[s] : offsets[s + 1]]
        if segment:
            out[s] = [sum(column) for column in zip(*segment, strict=True)]
    return out
