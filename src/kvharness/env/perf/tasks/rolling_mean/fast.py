"""Rolling mean from one cumulative sum (the oracle)."""

import numpy as np


def rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of each length-``window`` window ending at each position of ``x``, NaN before the
    first full window; a new float64 array of the same length. The difference of two prefix
    sums loses about ``eps * max|prefix sum|``, well inside the tolerance for ``|x| < 1e4``."""
    n = x.shape[0]
    out = np.full(n, np.nan, dtype=np.float64)
    if window > n:
        return out
    sums = np.concatenate(([0.0], np.cumsum(x)))
    out[window - 1 :] = (sums[window:] - sums[:-window]) / window
    return out
