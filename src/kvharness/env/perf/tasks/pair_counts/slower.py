"""Adjacent token-pair counts in pure Python on plain ints (``tolist`` and
``itertools.pairwise`` rather than indexing numpy one element at a time)."""

from itertools import pairwise

import numpy as np


def pair_counts(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """Count each adjacent pair of ``ids``; a new int64 array ``[vocab_size, vocab_size]``."""
    counts = [[0] * vocab_size for _ in range(vocab_size)]
    for a, b in pairwise(ids.tolist()):
        counts[a][b] += 1
    return np.array(counts, dtype=np.int64).reshape(vocab_size, vocab_size)
