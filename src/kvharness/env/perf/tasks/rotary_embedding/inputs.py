"""Inputs of the rotary_embedding task: correctness cases and one timed call, all drawn from
``rng``."""

import numpy as np

Args = tuple[np.ndarray, np.ndarray]


def _args(rng: np.random.Generator, seq: int, heads: int, head_dim: int, top: int = 4096) -> Args:
    x = rng.normal(size=(seq, heads, head_dim)).astype(np.float32)
    return x, rng.integers(0, top, size=seq).astype(np.int64)


def cases(rng: np.random.Generator) -> list[Args]:
    """No tokens, one token at position 0, the smallest head, one head, repeated and very large
    positions, and a few random medium arrays."""
    x, _ = _args(rng, 5, 2, 8)
    return [
        _args(rng, 0, 4, 16),
        (rng.normal(size=(1, 1, 4)).astype(np.float32), np.zeros(1, dtype=np.int64)),
        _args(rng, 3, 2, 2),
        _args(rng, 9, 1, 32),
        (x, np.full(5, 17, dtype=np.int64)),
        _args(rng, 6, 3, 64, top=100_000),
        (
            rng.uniform(-30.0, 30.0, size=(4, 2, 16)).astype(np.float32),
            np.arange(4, dtype=np.int64),
        ),
        _args(rng, 20, 4, 64),
        _args(rng, 33, 8, 128),
    ]


def timing(rng: np.random.Generator) -> Args:
    """A few hundred tokens of 8 heads of dimension 64, positions across a long context."""
    x, _ = _args(rng, 320, 8, 64)
    return x, np.sort(rng.integers(0, 32_768, size=320)).astype(np.int64)
