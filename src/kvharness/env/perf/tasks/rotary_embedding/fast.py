"""Rotary position embedding of all tokens and heads at once (the oracle)."""

import numpy as np

BASE = 10000.0


def rotary_embedding(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Rotate the halves of each head vector of ``x`` by the angles of its token's position; a
    new float32 array of the same shape. Angles and their sines and cosines are float64 (one per
    token and frequency); the rotation itself is float32, well inside the tolerance."""
    half = x.shape[2] // 2
    inv_freq = BASE ** (-2.0 * np.arange(half) / x.shape[2])
    angle = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    c = np.cos(angle).astype(np.float32)[:, None, :]
    s = np.sin(angle).astype(np.float32)[:, None, :]
    a = x[:, :, :half]
    b = x[:, :, half:]
    out = np.empty_like(x)
    out[:, :, :half] = a * c - b * s
    out[:, :, half:] = b * c + a * s
    return out
