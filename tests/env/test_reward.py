"""Reward rules over submissions: pure, exact values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvharness.env.reward import (
    RewardRule,
    Submission,
    episode_reward,
    parse_rule,
    step_reward,
)


def subs(*triples: tuple[int, float, float]) -> list[Submission]:
    return [Submission(step, elapsed, score) for step, elapsed, score in triples]


WRONG_THEN_RIGHT = subs((3, 10.0, 0.5), (6, 20.0, 1.0))
RIGHT_THEN_WORSE = subs((3, 10.0, 1.0), (6, 20.0, 0.25))


def test_no_submission_is_zero_under_every_rule() -> None:
    for kind in ("best", "last", "discounted"):
        assert episode_reward([], RewardRule(kind)) == 0.0  # type: ignore[arg-type]
        assert step_reward([], RewardRule(kind)) == 0.0  # type: ignore[arg-type]


def test_best_and_last() -> None:
    assert episode_reward(WRONG_THEN_RIGHT, RewardRule("best")) == 1.0
    assert episode_reward(WRONG_THEN_RIGHT, RewardRule("last")) == 1.0
    assert episode_reward(RIGHT_THEN_WORSE, RewardRule("best")) == 1.0
    assert episode_reward(RIGHT_THEN_WORSE, RewardRule("last")) == 0.25


def test_discounted_by_step_and_by_second() -> None:
    by_step = RewardRule("discounted", discount=0.9, unit="step")
    assert episode_reward(WRONG_THEN_RIGHT, by_step) == pytest.approx(max(0.5 * 0.9**3, 0.9**6))
    by_second = RewardRule("discounted", discount=0.95, unit="second")
    assert episode_reward(WRONG_THEN_RIGHT, by_second) == pytest.approx(
        max(0.5 * 0.95**10, 0.95**20)
    )
    # A steep discount lets the early partial fix win over the late full one.
    steep = RewardRule("discounted", discount=0.7, unit="step")
    assert episode_reward(WRONG_THEN_RIGHT, steep) == pytest.approx(0.5 * 0.7**3)


def test_submission_cost_floors_at_zero() -> None:
    rule = RewardRule("best", submission_cost=0.3)
    assert episode_reward(WRONG_THEN_RIGHT, rule) == pytest.approx(0.7)
    many = subs(*((i, float(i), 0.2) for i in range(5)))
    assert episode_reward(many, rule) == 0.0


def test_step_rewards_sum_to_episode_reward_last_rule_can_go_negative() -> None:
    rule = RewardRule("last")
    steps = [step_reward(RIGHT_THEN_WORSE[: i + 1], rule) for i in range(2)]
    assert steps == [1.0, -0.75]
    assert sum(steps) == episode_reward(RIGHT_THEN_WORSE, rule)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 50),
            st.floats(0, 100, allow_nan=False),
            st.floats(0, 1, allow_nan=False),
        ),
        max_size=8,
    ),
    st.sampled_from(["best", "last", "discounted"]),
    st.floats(0.5, 1.0),
    st.sampled_from(["step", "second"]),
    st.floats(0, 0.3),
)
def test_step_rewards_telescope_and_reward_in_unit_interval(
    triples: list[tuple[int, float, float]], kind: str, discount: float, unit: str, cost: float
) -> None:
    rule = RewardRule(kind, discount, unit, cost)  # type: ignore[arg-type]
    submissions = subs(*triples)
    total = sum(step_reward(submissions[: i + 1], rule) for i in range(len(submissions)))
    reward = episode_reward(submissions, rule)
    assert math.isclose(total, reward, abs_tol=1e-9)
    assert 0.0 <= reward <= 1.0


def test_bad_values_are_refused() -> None:
    with pytest.raises(ValueError, match="score"):
        Submission(0, 0.0, 1.5)
    with pytest.raises(ValueError, match="unknown reward rule"):
        RewardRule("mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="discount"):
        RewardRule("discounted", discount=0.0)


def test_parse_rule() -> None:
    assert parse_rule("best") == RewardRule("best")
    assert parse_rule("last,cost=0.1") == RewardRule("last", submission_cost=0.1)
    assert parse_rule("discounted") == RewardRule("discounted")
    assert parse_rule("discounted:0.9") == RewardRule("discounted", 0.9, "step")
    assert parse_rule("discounted:0.999/second") == RewardRule("discounted", 0.999, "second")
    for bad, msg in [
        ("mean", "unknown reward rule"),
        ("best:0.9", "takes no argument"),
        ("discounted:x", "not a number"),
        ("discounted:0.9/minute", "unit"),
        ("best,gamma=1", "cost"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse_rule(bad)
