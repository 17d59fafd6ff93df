"""Row-wise softmax with torch operations on blocks of rows: still a Python loop, with one set of
launches per block instead of per row."""

import torch

_ROWS = 16


def softmax_triton(x: torch.Tensor) -> torch.Tensor:
    """Softmax of each row of the 2-D float32 tensor ``x``; a new tensor on the same device."""
    out = torch.empty_like(x)
    if x.shape[1] == 0:
        return out
    for start in range(0, x.shape[0], _ROWS):
        block = x[start : start + _ROWS]
        shifted = block - block.max(dim=1, keepdim=True).values
        exps = torch.exp(shifted)
        out[start : start + _ROWS] = exps / exps.sum(dim=1, keepdim=True)
    return out
