"""Policies by name: every built-in under its own name, unknown names answered with the list."""

from __future__ import annotations

import pytest

from kvharness.routing.base import Policy
from kvharness.routing.registry import POLICIES, available_policies, make_policy


def test_policies_are_registered_under_their_own_names() -> None:
    assert available_policies() == POLICIES.names() == sorted(POLICIES)
    for name in available_policies():
        policy = make_policy(name)
        assert isinstance(policy, Policy) and policy.name == name
    with pytest.raises(ValueError, match=r"^unknown policy 'nope'; choose from agent_aware, "):
        make_policy("nope")
