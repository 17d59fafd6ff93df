"""Adjacent token-pair counts, one pair at a time: the slow, trusted reference."""

import numpy as np


def pair_counts(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """Count each adjacent pair ``(ids[i], ids[i + 1])`` of the 1-D int64 array ``ids`` (values
    in ``0 .. vocab_size - 1``). Returns a new int64 array ``[vocab_size, vocab_size]``."""
    counts = [[0] * vocab_size for _ in range(vocab_size)]
    for i in range(ids.shape[0] - 1):
        counts[ids[i]][ids[i + 1]] += 1
    return np.array(counts, dtype=np.int64).reshape(vocab_size, vocab_size)
