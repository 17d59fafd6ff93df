"""Inputs of the prefix_sum task: correctness cases and one timed call, all drawn from ``rng``."""

import numpy as np

_BIG = 2**62


def _cancelling(rng: np.random.Generator, n: int) -> np.ndarray:
    """Values near ±2**62 that alternate in sign, so every partial sum stays within int64."""
    big = rng.integers(_BIG - 1000, _BIG, size=n)
    signs = np.where(np.arange(n) % 2 == 0, 1, -1)
    return (big * signs).astype(np.int64)


def cases(rng: np.random.Generator) -> list[tuple[np.ndarray]]:
    """Empty, one element, all zeros, negative values, values near the int64 limits whose sums
    cancel, odd lengths around the chunk sizes naive code uses, and random medium arrays."""
    return [
        (np.zeros(0, dtype=np.int64),),
        (np.array([-7], dtype=np.int64),),
        (np.zeros(13, dtype=np.int64),),
        (rng.integers(-100, 100, size=7, dtype=np.int64),),
        (_cancelling(rng, 9),),
        (np.array([2**63 - 1, -(2**63 - 1), -(2**63), 2**63 - 1], dtype=np.int64),),
        (rng.integers(-(10**12), 10**12, size=1023, dtype=np.int64),),
        (rng.integers(0, 50, size=4097, dtype=np.int64),),
        (rng.integers(-(2**40), 2**40, size=20_000, dtype=np.int64),),
    ]


def timing(rng: np.random.Generator) -> tuple[np.ndarray]:
    """One large array: about 400,000 values."""
    return (rng.integers(-(2**40), 2**40, size=400_000, dtype=np.int64),)
