"""The agent-session workload model: block chains, turns, sessions, loaders and statistics."""

from kvharness.workload.chain import (
    BlockChain,
    ChainBuilder,
    materialise,
    materialise_text,
    shared_prefix_tokens,
)
from kvharness.workload.ideal import IdealCache, IdealHit, engine_cached_tokens
from kvharness.workload.images import Image, grid_tokens
from kvharness.workload.model import Arrival, Message, Session, Turn, Workload

__all__ = [
    "Arrival",
    "BlockChain",
    "ChainBuilder",
    "IdealCache",
    "IdealHit",
    "Image",
    "Message",
    "Session",
    "Turn",
    "Workload",
    "engine_cached_tokens",
    "grid_tokens",
    "materialise",
    "materialise_text",
    "shared_prefix_tokens",
]
