"""Inputs of the softmax_triton task (numpy float32 arrays; the grader makes them torch tensors
on the device): correctness cases and one timed call, all drawn from ``rng``. The cases are
small, as the Triton interpreter that runs them on CPU-only machines is slow."""

import numpy as np
from numpy.typing import ArrayLike


def _f32(a: ArrayLike) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def cases(rng: np.random.Generator) -> list[tuple[np.ndarray]]:
    """Empty shapes, one element, one row, one column, column counts on and off powers of two,
    ties, large magnitudes and a few random small arrays."""
    return [
        (_f32(np.zeros((0, 8))),),
        (_f32(np.zeros((3, 0))),),
        (_f32([[rng.normal()]]),),
        (_f32(rng.normal(size=(1, 100))),),
        (_f32(rng.normal(size=(7, 1))),),
        (_f32(np.full((4, 16), 1.5)),),
        (_f32(rng.integers(-2, 3, size=(5, 33))),),
        (_f32(rng.uniform(-80.0, 80.0, size=(6, 64))),),
        (_f32(rng.normal(scale=3.0, size=(64, 100))),),
        (_f32(rng.normal(size=(17, 129))),),
    ]


def timing(rng: np.random.Generator) -> tuple[np.ndarray]:
    """About a thousand rows of a thousand columns (not a power of two)."""
    return (_f32(rng.normal(scale=4.0, size=(1024, 1000))),)
