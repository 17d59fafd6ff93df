"""Rolling mean that still sums every window afresh, but with the built-in ``sum`` of a list
slice instead of an explicit loop."""

import numpy as np


def rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of each length-``window`` window ending at each position of ``x``, NaN before the
    first full window; a new float64 array of the same length."""
    values = x.tolist()
    out = np.full(len(values), np.nan, dtype=np.float64)
    if window > len(values):
        return out
    out[window - 1 :] = [
        sum(values[i - window + 1 : i + 1]) / window for i in range(window - 1, len(values))
    ]
    return out
