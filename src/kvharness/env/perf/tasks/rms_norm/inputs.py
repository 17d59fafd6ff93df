"""Inputs of the rms_norm task: correctness cases and one timed call, all drawn from ``rng``."""

import numpy as np

Args = tuple[np.ndarray, np.ndarray, float]


def _args(rng: np.random.Generator, x: np.ndarray, eps: float = 1e-6) -> Args:
    return x, rng.normal(1.0, 0.2, size=x.shape[1]), eps


def cases(rng: np.random.Generator) -> list[Args]:
    """Edge shapes (no rows, one column, one element, one row), zero rows, tiny and large
    magnitudes, a large eps and a few random medium arrays."""
    return [
        _args(rng, np.zeros((0, 8))),
        _args(rng, rng.normal(size=(5, 1))),
        _args(rng, np.array([[-2.0]])),
        _args(rng, rng.normal(size=(1, 33))),
        _args(rng, np.zeros((3, 10))),
        _args(rng, rng.normal(scale=1e-4, size=(4, 21))),
        _args(rng, rng.normal(scale=1e3, size=(6, 19))),
        _args(rng, rng.normal(size=(7, 12)), eps=1.0),
        _args(rng, rng.normal(scale=3.0, size=(40, 96))),
    ]


def timing(rng: np.random.Generator) -> Args:
    """One large array: about 2000 rows of 128 columns."""
    return _args(rng, rng.normal(size=(2000, 128)))
