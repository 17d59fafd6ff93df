"""Layer normalisation of all rows at once (the oracle)."""

import numpy as np


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Normalise each row of ``x`` over the last axis, then scale by ``gamma``, shift by ``beta``."""
    centred = x - x.mean(axis=1, keepdims=True)
    var = np.einsum("ij,ij->i", centred, centred) / x.shape[1]
    centred *= (1.0 / np.sqrt(var + eps))[:, None]
    centred *= gamma
    centred += beta
    return centred
