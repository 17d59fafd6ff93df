"""Inputs of the rolling_mean task: correctness cases and one timed call, all drawn from
``rng``."""

import numpy as np

Args = tuple[np.ndarray, int]


def cases(rng: np.random.Generator) -> list[Args]:
    """Empty input, window 1, window equal to and larger than the length, one value, constant
    values, a large offset, alternating extremes, and a few random medium series."""
    return [
        (np.zeros(0), 3),
        (np.array([2.5]), 1),
        (np.array([2.5]), 2),
        (rng.normal(size=9), 1),
        (rng.normal(size=9), 9),
        (rng.normal(size=9), 12),
        (np.full(20, 0.1), 7),
        (rng.normal(9e3, 1.0, size=500), 50),
        (np.where(np.arange(301) % 2 == 0, 9999.0, -9999.0), 4),
        (rng.normal(size=2000).cumsum() / 50, 37),
    ]


def timing(rng: np.random.Generator) -> Args:
    """Tens of thousands of values with a window of about fifty."""
    return rng.normal(size=30_000), 50
