"""Rolling mean that sums every window afresh: the slow, trusted reference."""

import numpy as np


def rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of each length-``window`` window of the 1-D float64 array ``x`` ending at each
    position; NaN where fewer than ``window`` values precede (inclusive). Returns a new float64
    array of the same length."""
    values = x.tolist()
    out = np.full(len(values), np.nan, dtype=np.float64)
    for i in range(window - 1, len(values)):
        total = 0.0
        for j in range(i - window + 1, i + 1):
            total += values[j]
        out[i] = total / window
    return out
