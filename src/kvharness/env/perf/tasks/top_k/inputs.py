"""Inputs of the top_k task: correctness cases and one timed call, all drawn from ``rng``."""

import numpy as np

Args = tuple[np.ndarray, int]


def cases(rng: np.random.Generator) -> list[Args]:
    """Edge shapes (no rows, one element, one row), k of 0, 1 and n, rows full of ties (also
    at the k-th place), signed zeros, extreme values and a few random medium arrays."""
    zeros = rng.choice([0.0, -0.0, 1.0, -1.0], size=(6, 15))
    return [
        (np.zeros((0, 6)), 3),
        (np.array([[4.0]]), 1),
        (rng.normal(size=(3, 9)), 0),
        (rng.normal(size=(1, 40)), 5),
        (rng.normal(size=(4, 11)), 11),
        (np.full((3, 12), 7.0), 4),
        (rng.integers(0, 4, size=(8, 30)).astype(np.float64), 6),
        (zeros, 7),
        (rng.choice([-1e308, 1e308, 5e-324, 0.0], size=(5, 21)), 9),
        (rng.normal(size=(30, 257)), 16),
    ]


def timing(rng: np.random.Generator) -> Args:
    """Logit-like rows, with ties: tens of rows of about a thousand columns, k=20."""
    return np.round(rng.normal(size=(96, 1024)), 3), 20
