"""Inputs of the bincount_weighted task: correctness cases and one timed call, all drawn from
``rng``."""

import numpy as np

Args = tuple[np.ndarray, np.ndarray, int]


def _args(rng: np.random.Generator, x: np.ndarray, minlength: int) -> Args:
    return x.astype(np.int64), rng.normal(size=x.shape[0]), minlength


def cases(rng: np.random.Generator) -> list[Args]:
    """Empty input (with and without minlength), one value, all in one bin, minlength below,
    at and above the largest bin, a large bin number, and a few random medium arrays."""
    return [
        _args(rng, np.zeros(0), 0),
        _args(rng, np.zeros(0), 5),
        _args(rng, np.array([3]), 0),
        _args(rng, np.full(50, 7), 2),
        _args(rng, rng.integers(0, 10, size=40), 10),
        _args(rng, rng.integers(0, 10, size=40), 25),
        _args(rng, np.array([0, 100_000, 0, 5]), 3),
        (rng.integers(0, 30, size=200), rng.uniform(-1e6, 1e6, size=200), 0),
        _args(rng, rng.integers(0, 1000, size=5000), 1000),
        _args(rng, rng.zipf(1.5, size=3000) % 2000, 0),
    ]


def timing(rng: np.random.Generator) -> Args:
    """A few hundred thousand values over some thousands of bins."""
    return _args(rng, rng.integers(0, 4096, size=150_000), 4096)
