"""Rotary position embedding with each head's vector rotated by numpy, one Python iteration per
token and head."""

import numpy as np

BASE = 10000.0


def rotary_embedding(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Rotate the halves of each head vector of ``x`` by the angles of its token's position; a
    new float32 array of the same shape."""
    seq, heads, head_dim = x.shape
    half = head_dim // 2
    inv_freq = BASE ** (-2.0 * np.arange(half) / head_dim)
    out = np.zeros(x.shape, dtype=np.float32)
    for t in range(seq):
        angle = float(positions[t]) * inv_freq
        c = np.cos(angle)
        s = np.sin(angle)
        for h in range(heads):
            a = x[t, h, :half].astype(np.float64)
            b = x[t, h, half:].astype(np.float64)
            out[t, h, :half] = a * c - b * s
            out[t, h, half:] = b * c + a * s
    return out
