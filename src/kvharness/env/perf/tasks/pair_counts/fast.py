"""Adjacent token-pair counts with one ``numpy.bincount`` over pair codes (the oracle)."""

import numpy as np


def pair_counts(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """Count each adjacent pair of ``ids``; a new int64 array ``[vocab_size, vocab_size]``."""
    codes = ids[:-1] * vocab_size + ids[1:]
    counts = np.bincount(codes, minlength=vocab_size * vocab_size)
    return counts.astype(np.int64, copy=False).reshape(vocab_size, vocab_size)
