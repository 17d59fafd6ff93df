"""Inputs of the cdist task: correctness cases and one timed call, all drawn from ``rng``."""

import numpy as np

Args = tuple[np.ndarray, np.ndarray]


def cases(rng: np.random.Generator) -> list[Args]:
    """No points on either side, one point, one dimension, identical and repeated points
    (distance 0), points a tiny distance apart, and a few random medium sets."""
    a = rng.normal(size=(7, 5))
    b = np.concatenate([a[::2], rng.normal(size=(3, 5))])
    near = rng.normal(size=(4, 3))
    return [
        (np.zeros((0, 3)), rng.normal(size=(4, 3))),
        (rng.normal(size=(5, 3)), np.zeros((0, 3))),
        (rng.normal(size=(1, 4)), rng.normal(size=(1, 4))),
        (rng.normal(size=(6, 1)), rng.normal(size=(9, 1))),
        (a, b),
        (a, a),
        (near, near + 1e-9),
        (
            rng.integers(-3, 4, size=(10, 6)).astype(np.float64),
            rng.integers(-3, 4, size=(8, 6)).astype(np.float64),
        ),
        (rng.normal(size=(30, 17)), rng.normal(size=(25, 17))),
    ]


def timing(rng: np.random.Generator) -> Args:
    """A few hundred points on each side in three dimensions."""
    return rng.normal(size=(350, 3)), rng.normal(size=(350, 3))
