"""Inputs of the layer_norm task: correctness cases and one timed call, all drawn from ``rng``."""

import numpy as np

Args = tuple[np.ndarray, np.ndarray, np.ndarray, float]


def _args(rng: np.random.Generator, x: np.ndarray, eps: float = 1e-5) -> Args:
    n = x.shape[1]
    return x, rng.normal(1.0, 0.2, size=n), rng.normal(0.0, 0.2, size=n), eps


def cases(rng: np.random.Generator) -> list[Args]:
    """Edge shapes (no rows, one column, one element, one row), constant rows, a shifted scale,
    a large eps and a few random medium arrays."""
    return [
        _args(rng, np.zeros((0, 8))),
        _args(rng, rng.normal(size=(5, 1))),
        _args(rng, np.array([[3.0]])),
        _args(rng, rng.normal(size=(1, 33))),
        _args(rng, np.full((4, 10), 0.1)),
        _args(rng, rng.normal(1e3, 1e-2, size=(6, 19))),
        _args(rng, rng.normal(size=(7, 12)), eps=1.0),
        _args(rng, rng.integers(-3, 4, size=(9, 16)).astype(np.float64)),
        _args(rng, rng.normal(scale=5.0, size=(40, 96))),
    ]


def timing(rng: np.random.Generator) -> Args:
    """One large array: about 1500 rows of 128 columns."""
    return _args(rng, rng.normal(size=(1500, 128)))
