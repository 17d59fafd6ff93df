"""Built-in routing policies; importing this package registers them."""

from kvharness.routing.policies import (
    agent_aware,
    dynamo_kv,
    least_outstanding,
    llmd_precise,
    round_robin,
    session,
    sglang_cache_aware,
)

__all__ = [
    "agent_aware",
    "dynamo_kv",
    "least_outstanding",
    "llmd_precise",
    "round_robin",
    "session",
    "sglang_cache_aware",
]
