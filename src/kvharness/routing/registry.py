"""Routing policies by name: the one place that knows them all.

The same name is the same class in the simulator, the gateway and the CLI. A new policy is one
module under :mod:`kvharness.routing.policies` and one line in ``_BUILTIN``; a policy from
outside the package registers itself with :func:`register_policy`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

from kvharness.registry import Registry
from kvharness.routing.base import Policy
from kvharness.routing.policies.agent_aware import AgentAware
from kvharness.routing.policies.dynamo_kv import DynamoKV
from kvharness.routing.policies.least_outstanding import LeastOutstanding
from kvharness.routing.policies.llmd_precise import LlmdPrecise
from kvharness.routing.policies.round_robin import RoundRobin
from kvharness.routing.policies.session import SessionHash
from kvharness.routing.policies.sglang_cache_aware import SglangCacheAware

__all__ = [
    "POLICIES",
    "available_policies",
    "make_policy",
    "parse_policy_options",
    "policy_from_spec",
    "register_policy",
]

POLICIES: Registry[Policy] = Registry("policy")

P = TypeVar("P", bound=type[Policy])


def register_policy(cls: P) -> P:
    """Make a policy class available by its ``name`` everywhere; usable as a class decorator."""
    POLICIES.register(cls.name, cls)
    return cls


_BUILTIN: tuple[type[Policy], ...] = (
    AgentAware,
    DynamoKV,
    LeastOutstanding,
    LlmdPrecise,
    RoundRobin,
    SessionHash,
    SglangCacheAware,
)
for _cls in _BUILTIN:
    register_policy(_cls)


def available_policies() -> list[str]:
    return POLICIES.names()


def make_policy(name: str, **options: Any) -> Policy:
    """A new policy object by name; ``options`` go to its constructor."""
    return POLICIES.make(name, **options)


def parse_policy_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as constructor options: a value is read as JSON (numbers, booleans,
    lists) and kept as a string when it is not JSON. Raises ValueError naming a malformed pair."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"a policy option is KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def policy_from_spec(spec: str) -> Policy:
    """A policy from ``NAME`` or ``NAME:KEY=VALUE,...`` (its options, read as
    :func:`parse_policy_options` reads them), e.g. ``agent_aware:compute_weight=0``.
    Raises ValueError naming the spec when the name is unknown or the options are refused."""
    name, _, rest = spec.partition(":")
    try:
        return make_policy(name, **parse_policy_options([o for o in rest.split(",") if o]))
    except (TypeError, ValueError) as err:
        raise ValueError(f"policy {spec!r}: {err}") from None
