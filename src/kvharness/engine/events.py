"""KV-cache events: what a block pool reports as blocks enter and leave its prefix cache.

The same types whether they come from the engine model (the simulator) or from a real vLLM over ZMQ
(the gateway decodes vLLM's msgpack into these). Field names follow vLLM's ``kv_events.py``.
Block hashes are ints; ``token_ids`` may be empty where the producer does not know them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AllBlocksCleared", "BlockKeys", "BlockRemoved", "BlockStored", "KVEvent"]

BlockKeys = tuple[str | bytes | tuple[str, int], ...] | None
"""The extra keys of one block's hash, as vLLM publishes them (untagged): a LoRA name or cache
salt as a string, an image as ``(identifier, start offset relative to the block's start)``, a
prompt-embeddings digest; None where the block has none."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks entered the prefix cache, as a chain continuing ``parent_block_hash``."""

    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...] = ()
    block_size: int = 0
    medium: str | None = None
    """Where the blocks live: None / "GPU" for device memory, "CPU" for an offload tier."""
    extra_keys: tuple[BlockKeys, ...] | None = None
    """One entry per block of ``block_hashes`` (None: no block has any, or the producer does
    not say)."""


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left the prefix cache (evicted)."""

    block_hashes: tuple[int, ...]
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole prefix cache was reset."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared
