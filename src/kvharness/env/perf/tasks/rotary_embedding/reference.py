"""Rotary position embedding (rotate-half convention), one element at a time: the slow, trusted
reference."""

import math

import numpy as np

BASE = 10000.0


def rotary_embedding(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Rotate each pair ``(x[t, h, i], x[t, h, i + half])`` of the float32 array ``x`` ``[seq,
    heads, head_dim]`` by the angle ``positions[t] * BASE ** (-2 * i / head_dim)``, computed in
    float64. Returns a new float32 array of the same shape."""
    seq, heads, head_dim = x.shape
    half = head_dim // 2
    inv_freq = [BASE ** (-2 * i / head_dim) for i in range(half)]
    out = np.zeros(x.shape, dtype=np.float32)
    for t in range(seq):
        pos = int(positions[t])
        for i in range(half):
            angle = pos * inv_freq[i]
            c = math.cos(angle)
            s = math.sin(angle)
            for h in range(heads):
                a = float(x[t, h, i])
                b = float(x[t, h, i + half])
                out[t, h, i] = a * c - b * s
                out[t, h, i + half] = b * c + a * s
    return out
