"""Inputs of the paged_gather task: correctness cases and one timed call, all drawn from
``rng``."""

import numpy as np

Args = tuple[np.ndarray, np.ndarray, np.ndarray]


def _layout(
    rng: np.random.Generator,
    lens: list[int],
    *,
    num_blocks: int,
    block_size: int,
    head_dim: int,
    max_blocks: int | None = None,
) -> Args:
    """A cache of random blocks and a block table naming random blocks (shared between
    sequences now and then), with -1 or junk padding past each sequence's last block."""
    seq_lens = np.array(lens, dtype=np.int32)
    need = -(-seq_lens // block_size)
    width = max_blocks if max_blocks is not None else max(int(need.max(initial=0)), 1)
    table = rng.integers(0, num_blocks, size=(len(lens), width)).astype(np.int32)
    for s, used in enumerate(need.tolist()):
        table[s, used:] = -1 if s % 2 else rng.integers(0, num_blocks)
    cache = rng.normal(size=(num_blocks, block_size, head_dim)).astype(np.float32)
    return cache, table, seq_lens


def cases(rng: np.random.Generator) -> list[Args]:
    """No sequences, all-empty sequences, one token, lengths on and off block boundaries,
    block size 1, wide padding, and a few random medium layouts."""
    return [
        _layout(rng, [], num_blocks=4, block_size=4, head_dim=8),
        _layout(rng, [0, 0], num_blocks=3, block_size=4, head_dim=8, max_blocks=2),
        _layout(rng, [1], num_blocks=1, block_size=16, head_dim=1),
        _layout(rng, [16, 15, 17, 0, 32], num_blocks=9, block_size=16, head_dim=5),
        _layout(rng, [7, 3, 5], num_blocks=20, block_size=1, head_dim=4),
        _layout(rng, [5, 2], num_blocks=6, block_size=4, head_dim=3, max_blocks=8),
        _layout(
            rng, rng.integers(0, 200, size=6).tolist(), num_blocks=80, block_size=16, head_dim=8
        ),
        _layout(
            rng, rng.integers(1, 90, size=11).tolist(), num_blocks=64, block_size=8, head_dim=32
        ),
    ]


def timing(rng: np.random.Generator) -> Args:
    """A batch of 8 sequences of up to 2500 tokens, 16-token blocks, head_dim 16."""
    lens = rng.integers(300, 2500, size=8).tolist()
    return _layout(rng, lens, num_blocks=2048, block_size=16, head_dim=16)
