"""KV-cache events: what a block pool reports as blocks enter and leave its prefix cache.

The same types whether they come from the engine model (the simulator) or from a real vLLM over ZMQ
(the gateway decodes vLLM's msgpack into these). Field names follow vLLM's ``kv_events.py``.
Block hashes are ints; ``token_ids`` may be empty where the producer does not know them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AllBlocksCleared", "BlockRemoved", "BlockStored", "KVEvent"]


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks entered the prefix cache, as a chain continuing ``parent_block_hash``."""

    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...] = ()
    block_size: int = 0
    medium: str | None = None
    """Where the blocks live: None / "GPU" for device memory, "CPU" for an offload tier."""


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left the prefix cache (evicted)."""

    block_hashes: tuple[int, ...]
    medium: str | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole prefix cache was reset."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared
