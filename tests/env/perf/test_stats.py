import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvharness.env.perf.stats import Speedup, TimingPolicy, t975


def test_t_quantile_matches_the_table_and_tends_to_the_normal():
    assert t975(1) == pytest.approx(12.706, abs=1e-3)
    assert t975(4) == pytest.approx(2.776, abs=1e-3)
    assert t975(30) == pytest.approx(2.042, abs=1e-3)
    assert t975(10_000) == pytest.approx(1.960, abs=2e-3)
    assert t975(40) < t975(30)


def test_geometric_mean_and_interval_by_hand():
    s = Speedup((2.0, 8.0))
    assert s.estimate == pytest.approx(4.0)
    logs = [math.log(2), math.log(8)]
    sd = math.sqrt(sum((x - math.log(4)) ** 2 for x in logs) / 1)
    half = t975(1) * sd / math.sqrt(2)
    assert s.low == pytest.approx(4.0 * math.exp(-half))
    assert s.high == pytest.approx(4.0 * math.exp(half))
    assert s.noise == pytest.approx(math.exp(half) - 1)


def test_one_round_says_nothing_about_spread():
    s = Speedup((3.0,))
    assert s.estimate == pytest.approx(3.0)
    assert s.low == 0.0 and s.high == math.inf


def test_no_round_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        Speedup(()).estimate  # noqa: B018


def test_score_is_the_lower_bound_on_a_log_scale():
    policy = TimingPolicy(min_speedup=1.0)
    assert policy.score(Speedup((1.0, 1.0, 1.0)), target=8.0) == 0.0
    assert policy.score(Speedup((8.0, 8.0, 8.0)), target=8.0) == pytest.approx(1.0)
    assert policy.score(Speedup((2.0, 2.0, 2.0)), target=8.0) == pytest.approx(1 / 3)
    assert policy.score(Speedup((100.0,) * 3), target=8.0) == 1.0
    assert policy.score(Speedup((0.5,) * 3), target=8.0) == 0.0
    # A wide interval lowers the score: only what the rounds prove is paid.
    assert policy.score(Speedup((1.5, 3.0, 6.0)), target=8.0) < policy.score(
        Speedup((3.0, 3.0, 3.0)), target=8.0
    )


def test_a_speedup_within_the_noise_floor_is_not_paid():
    policy = TimingPolicy()
    assert policy.min_speedup == 1.05
    assert policy.score(Speedup((1.04,) * 4), target=8.0) == 0.0
    assert policy.score(Speedup((2.1,) * 4), target=8.0) == pytest.approx(
        math.log(2.0) / math.log(8.0 / 1.05)
    )


def test_settled_when_tight_or_decided_or_out_of_rounds():
    policy = TimingPolicy(min_rounds=2, max_rounds=6, rel_ci=0.1)
    assert not policy.settled(Speedup((2.0,)), target=8.0)
    assert policy.settled(Speedup((2.0, 2.02, 1.98, 2.0)), target=8.0)  # tight
    assert not policy.settled(Speedup((1.5, 3.0, 2.0, 2.5)), target=8.0)  # wide and undecided
    assert policy.settled(Speedup((40.0, 80.0, 60.0, 50.0)), target=8.0)  # surely above target
    assert policy.settled(Speedup((0.5, 0.7, 0.6, 0.6)), target=8.0)  # surely slower
    assert policy.settled(Speedup((1.5, 3.0, 2.0, 1.5, 3.0, 2.0)), target=8.0)  # rounds spent


def test_rounds_come_in_pairs():
    """An odd round would leave one side running first once more than the other."""
    policy = TimingPolicy(min_rounds=2, max_rounds=6, rel_ci=0.1)
    assert not policy.settled(Speedup((2.0, 2.0, 2.0)), target=8.0)
    assert policy.settled(Speedup((2.0, 2.0)), target=8.0)


def test_policy_refuses_bad_values():
    with pytest.raises(ValueError, match="min_rounds"):
        TimingPolicy(min_rounds=1)
    with pytest.raises(ValueError, match="min_rounds"):
        TimingPolicy(min_rounds=3)
    with pytest.raises(ValueError, match="max_rounds"):
        TimingPolicy(min_rounds=4, max_rounds=2)
    with pytest.raises(ValueError, match="max_rounds"):
        TimingPolicy(min_rounds=4, max_rounds=5)
    with pytest.raises(ValueError, match="rel_ci"):
        TimingPolicy(rel_ci=0.0)
    with pytest.raises(ValueError, match="min_speedup"):
        TimingPolicy(min_speedup=0.9)


@given(st.lists(st.floats(0.01, 100.0), min_size=2, max_size=20))
def test_interval_brackets_the_estimate(ratios):
    s = Speedup(tuple(ratios))
    assert s.low <= s.estimate * (1 + 1e-12)
    assert s.estimate <= s.high * (1 + 1e-12)
    assert 0.0 <= TimingPolicy().score(s, target=4.0) <= 1.0
