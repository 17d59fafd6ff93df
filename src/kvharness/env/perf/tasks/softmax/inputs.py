"""Inputs of the softmax task: correctness cases and one timed call, all drawn from ``rng``."""

import numpy as np


def cases(rng: np.random.Generator) -> list[tuple[np.ndarray]]:
    """Edge shapes (empty, one element, one row, one column), ties, large magnitudes and a few
    random medium arrays."""
    return [
        (np.zeros((0, 5)),),
        (np.zeros((3, 0)),),
        (np.array([[rng.normal()]]),),
        (rng.normal(size=(1, 17)),),
        (rng.normal(size=(9, 1)),),
        (np.full((4, 6), 2.5),),
        (rng.integers(-2, 3, size=(7, 13)).astype(np.float64),),
        (rng.uniform(-1e3, 1e3, size=(5, 31)),),
        (rng.normal(scale=30.0, size=(33, 65)),),
        (rng.normal(size=(50, 128)),),
    ]


def timing(rng: np.random.Generator) -> tuple[np.ndarray]:
    """One large array: two thousand rows of a hundred columns."""
    return (rng.normal(scale=4.0, size=(2000, 100)),)
