"""Inputs of the segment_sum task: correctness cases and one timed call, all drawn from
``rng``."""

import numpy as np

Args = tuple[np.ndarray, np.ndarray]


def _csr(rng: np.random.Generator, sizes: list[int], features: int) -> Args:
    indptr = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64))).astype(np.int64)
    return rng.normal(size=(int(indptr[-1]), features)), indptr


def cases(rng: np.random.Generator) -> list[Args]:
    """No segments, all-empty segments, one row, empty segments first, last and in runs, one
    feature, one big segment, and a few random medium layouts."""
    return [
        _csr(rng, [], 4),
        _csr(rng, [0, 0, 0], 3),
        _csr(rng, [1], 1),
        _csr(rng, [0, 0, 3, 0, 0, 2, 0], 5),
        _csr(rng, [4, 0, 0, 0, 1], 1),
        _csr(rng, [200], 7),
        _csr(rng, [1] * 30, 2),
        _csr(rng, rng.integers(0, 5, size=40).tolist(), 6),
        _csr(rng, rng.poisson(20, size=60).tolist(), 16),
    ]


def timing(rng: np.random.Generator) -> Args:
    """A few thousand rows of 32 features in a few hundred segments, some empty."""
    sizes = rng.poisson(12, size=500) * (rng.random(500) > 0.1)
    return _csr(rng, sizes.tolist(), 32)
