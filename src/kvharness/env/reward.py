"""Episode reward: a pure rule over an episode's submissions.

An agent may submit several times; each submission is graded and scored in ``[0, 1]`` (the
fraction of FAIL_TO_PASS tests now passing, zero when a PASS_TO_PASS test broke). The episode's
reward is one number computed from the list of :class:`Submission` by a :class:`RewardRule`:

``best``
    the highest score of any submission (0 with none). Exploring with early wrong submissions
    costs nothing.
``last``
    the score of the final submission (0 with none): what a user would actually merge.
``discounted``
    ``max_i score_i * discount ** x_i`` where ``x_i`` is the submission's step index (``unit =
    "step"``, the number of actions taken before it) or its elapsed time in seconds since reset
    (``unit = "second"``). Faster solutions earn more; an early partial fix may beat a late full
    one when the discount is steep.

Every rule can also charge ``submission_cost`` per submission beyond the first (the reward is
floored at 0), to make "submit to probe the hidden tests" a priced choice.

The environment hands out the reward incrementally: the reward of step ``t`` is
``episode_reward(submissions so far) - episode_reward(submissions before t)``, so the sum of an
episode's step rewards equals its episode reward under any rule (with ``last``, a worse resubmission
gives a negative step reward). Pure functions: no clocks, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["RULES", "RewardRule", "Submission", "episode_reward", "parse_rule", "step_reward"]

RULES = ("best", "last", "discounted")


@dataclass(frozen=True, slots=True)
class Submission:
    """One graded submission. ``step``: actions taken before it in the episode (0-based index of
    the submit action); ``elapsed``: seconds since reset when it was graded; ``score`` in [0, 1]."""

    step: int
    elapsed: float
    score: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score must be in [0, 1], got {self.score}")
        if self.step < 0:
            raise ValueError(f"step must be >= 0, got {self.step}")
        if not (self.elapsed >= 0 and math.isfinite(self.elapsed)):
            raise ValueError(f"elapsed must be a finite number >= 0, got {self.elapsed}")


@dataclass(frozen=True, slots=True)
class RewardRule:
    """How an episode's submissions become its reward (see the module docstring).

    ``discount`` in (0, 1] applies per step or per second (``unit``) for ``kind="discounted"``;
    ``submission_cost`` >= 0 is subtracted per submission after the first.
    """

    kind: Literal["best", "last", "discounted"] = "best"
    discount: float = 0.99
    unit: Literal["step", "second"] = "step"
    submission_cost: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in RULES:
            raise ValueError(f"unknown reward rule {self.kind!r} (choose from {', '.join(RULES)})")
        if not 0.0 < self.discount <= 1.0:
            raise ValueError(f"discount must be in (0, 1], got {self.discount}")
        if self.unit not in ("step", "second"):
            raise ValueError(f"unit must be 'step' or 'second', got {self.unit!r}")
        if not (self.submission_cost >= 0 and math.isfinite(self.submission_cost)):
            raise ValueError(f"submission_cost must be >= 0, got {self.submission_cost}")


def episode_reward(submissions: Sequence[Submission], rule: RewardRule) -> float:
    """The episode's reward under ``rule``; 0.0 for an episode with no submissions."""
    if not submissions:
        return 0.0
    if rule.kind == "best":
        base = max(s.score for s in submissions)
    elif rule.kind == "last":
        base = submissions[-1].score
    else:
        base = max(
            s.score * rule.discount ** (s.step if rule.unit == "step" else s.elapsed)
            for s in submissions
        )
    return max(0.0, base - rule.submission_cost * (len(submissions) - 1))


def step_reward(submissions: Sequence[Submission], rule: RewardRule) -> float:
    """Reward of the step that produced the last of ``submissions``: the change in episode
    reward it caused (so step rewards sum to the episode reward)."""
    if not submissions:
        return 0.0
    return episode_reward(submissions, rule) - episode_reward(submissions[:-1], rule)


def parse_rule(spec: str) -> RewardRule:
    """A rule from a CLI spec: ``best``, ``last``, ``discounted``, or ``discounted:0.95``,
    ``discounted:0.999/second``; an optional ``,cost=0.05`` suffix sets ``submission_cost``.
    Raises ValueError with a one-line message on a bad spec."""
    head, _, tail = spec.partition(",")
    cost = 0.0
    if tail:
        key, _, value = tail.partition("=")
        if key.strip() != "cost":
            raise ValueError(f"bad reward rule {spec!r}: only ',cost=X' may follow the rule")
        try:
            cost = float(value)
        except ValueError:
            raise ValueError(f"bad reward rule {spec!r}: cost {value!r} is not a number") from None
    kind, _, arg = head.strip().partition(":")
    if kind not in RULES:
        raise ValueError(f"unknown reward rule {kind!r} (choose from {', '.join(RULES)})")
    if kind != "discounted":
        if arg:
            raise ValueError(f"bad reward rule {spec!r}: {kind!r} takes no argument")
        return RewardRule(kind, submission_cost=cost)  # type: ignore[arg-type]
    if not arg:
        return RewardRule("discounted", submission_cost=cost)
    factor, _, unit = arg.partition("/")
    try:
        discount = float(factor)
    except ValueError:
        raise ValueError(f"bad reward rule {spec!r}: discount {factor!r} is not a number") from None
    unit = unit or "step"
    if unit not in ("step", "second"):
        raise ValueError(f"bad reward rule {spec!r}: unit must be 'step' or 'second'")
    return RewardRule("discounted", discount, unit, cost)  # type: ignore[arg-type]
