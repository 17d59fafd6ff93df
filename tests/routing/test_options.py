"""KEY=VALUE policy options, as the gateway CLI and the simulator benchmarks take them."""

from __future__ import annotations

import pytest

from kvharness.routing.policies.agent_aware import AgentAware
from kvharness.routing.registry import make_policy, parse_policy_options


def test_values_are_json_or_strings() -> None:
    opts = parse_policy_options(["compute_weight=1", "pooled_rate=false", "name=x=y", "l=[1,2]"])
    assert opts == {"compute_weight": 1, "pooled_rate": False, "name": "x=y", "l": [1, 2]}
    policy = make_policy("agent_aware", **parse_policy_options(["compute_weight=0.5"]))
    assert isinstance(policy, AgentAware)
    assert policy.compute_weight == 0.5


@pytest.mark.parametrize("bad", ["nokey", "=1"])
def test_a_pair_without_key_or_sign_is_named(bad: str) -> None:
    with pytest.raises(ValueError, match=f"KEY=VALUE, got '{bad}'"):
        parse_policy_options([bad])
