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


def test_a_spec_names_a_policy_and_its_options() -> None:
    from kvharness.routing.policies.agent_aware import AgentAware
    from kvharness.routing.registry import policy_from_spec

    plain = policy_from_spec("agent_aware")
    assert isinstance(plain, AgentAware) and plain.compute_weight is None
    tuned = policy_from_spec("agent_aware:compute_weight=0.5,")
    assert isinstance(tuned, AgentAware) and tuned.compute_weight == 0.5
    with pytest.raises(ValueError, match=r"^policy 'agent_aware:weight=1': .*weight"):
        policy_from_spec("agent_aware:weight=1")
    with pytest.raises(ValueError, match=r"^policy 'agent_aware:compute_weight=-1': need "):
        policy_from_spec("agent_aware:compute_weight=-1")
    with pytest.raises(ValueError, match=r"^policy 'nope:x=1': unknown policy 'nope'"):
        policy_from_spec("nope:x=1")
    with pytest.raises(ValueError, match=r"KEY=VALUE"):
        policy_from_spec("agent_aware:compute_weight")
