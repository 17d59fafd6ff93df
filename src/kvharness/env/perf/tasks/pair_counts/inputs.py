"""Inputs of the pair_counts task: correctness cases and one timed call, all drawn from
``rng``."""

import numpy as np

Args = tuple[np.ndarray, int]


def _ids(values: list[int] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def cases(rng: np.random.Generator) -> list[Args]:
    """No ids, one id, a vocabulary of one, runs of one token (overlapping pairs), the largest
    id at both ends, skewed (Zipf-like) text and a few random medium arrays."""
    return [
        (_ids([]), 4),
        (_ids([2]), 3),
        (_ids([0, 0, 0, 0]), 1),
        (_ids([7, 7, 7, 1, 7, 7]), 8),
        (_ids([255, 0, 255]), 256),
        (rng.integers(0, 5, size=50), 5),
        (_ids(np.minimum(rng.zipf(1.3, size=3000) - 1, 299)), 300),
        (rng.integers(0, 512, size=5000), 512),
    ]


def timing(rng: np.random.Generator) -> Args:
    """A few hundred thousand ids of Zipf-like text over a vocabulary of a few hundred."""
    return _ids(np.minimum(rng.zipf(1.2, size=150_000) - 1, 383)), 384
