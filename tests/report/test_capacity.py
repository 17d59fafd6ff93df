"""Capacity at an SLO: tiers, what a run's turns say against one, and the search."""

from __future__ import annotations

import pytest

from kvharness.errors import UserError
from kvharness.report.capacity import TIERS, Point, measure, parse_tier, search
from kvharness.report.records import TurnRecord


def _turn(ttft: float, decode: float, tokens: int, error: str | None = None) -> TurnRecord:
    return TurnRecord("s", 0, "r", 0.0, 0.0, ttft, ttft + decode, 100, 0, 0, tokens, error=error)


def test_tiers_by_name_or_by_targets() -> None:
    assert parse_tier("fast") is TIERS["fast"]
    t = parse_tier("ttft=0.5,speed=40")
    assert (t.ttft_p90_s, t.speed_tok_s) == (0.5, 40.0)
    for bad in ("fastest", "ttft=1", "ttft=x,speed=2", "ttft=0,speed=2"):
        with pytest.raises(UserError, match="bad tier"):
            parse_tier(bad)


def test_a_run_meets_a_tier_when_nine_turns_in_ten_get_both_targets() -> None:
    tier = parse_tier("ttft=0.5,speed=40")
    turns = [_turn(0.1, 0.5, 31) for _ in range(18)] + [_turn(0.9, 2.0, 31), _turn(0.2, 0.1, 1)]
    p = measure(4, turns, tier)
    assert p.turns == 20 and p.failed == 0
    assert p.ttft_p90_s == pytest.approx(0.2, abs=0.1) and p.speed_p10_tok_s == pytest.approx(60)
    assert p.meets
    slow = [_turn(0.1, 1.0, 31) for _ in range(10)]  # 30 tokens a second
    assert not measure(4, slow, tier).meets
    assert not measure(4, [*turns, _turn(0.1, 0.5, 31, error="timeout")], tier).meets


def _threshold(limit: int, tried: list[int]) -> object:
    def evaluate(n: int) -> Point:
        tried.append(n)
        return Point(n, 0.1, 50.0, 10, 0, n <= limit)

    return evaluate


@pytest.mark.parametrize("limit", [0, 1, 2, 5, 8, 13, 63, 64])
def test_search_finds_the_largest_passing_concurrency_in_log_runs(limit: int) -> None:
    tried: list[int] = []
    best, points = search(_threshold(limit, tried), max_concurrency=64)  # type: ignore[arg-type]
    assert best == limit
    assert [p.concurrency for p in points] == tried
    assert len(tried) <= 2 * 7 + 1


def test_search_up_to_a_maximum_that_is_not_a_power_of_two() -> None:
    tried: list[int] = []
    best, _ = search(_threshold(1000, tried), max_concurrency=12)  # type: ignore[arg-type]
    assert best == 12 and tried == [1, 2, 4, 8, 12]
