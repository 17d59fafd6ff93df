from __future__ import annotations

import pytest

from kvharness.errors import UserError
from kvharness.workload.load import load_workload, parse_synthetic
from kvharness.workload.stats import workload_stats
from kvharness.workload.synthetic import SyntheticConfig, generate


def test_same_seed_same_workload_other_seed_other() -> None:
    cfg = SyntheticConfig(sessions=4, seed=7)
    assert generate(cfg) == generate(cfg)
    assert generate(SyntheticConfig(sessions=4, seed=8)) != generate(cfg)


def test_calibrated_to_published_agent_statistics() -> None:
    s = workload_stats(generate(SyntheticConfig(sessions=48, seed=1)))
    # ~84 steps a session, ~96% of input tokens cacheable, 700-800 token median appends,
    # tool latency median in the 125-626 ms range with a heavy tail (shared/traces/README.md).
    assert 65 <= s.turns_per_session.mean <= 100
    assert 0.95 <= s.ideal_hit_ratio_tokens <= 0.99
    assert 600 <= s.append_tokens.p50 <= 900
    assert 0.1 <= s.gap_seconds.p50 <= 0.7
    assert s.gap_seconds.max > 60 * s.gap_seconds.p50
    assert s.input_tokens.p50 > 40_000


def test_sessions_share_repositories() -> None:
    w = generate(SyntheticConfig(sessions=6, repos=2, seed=3))
    groups: dict[str | None, list[int]] = {}
    for s in w.sessions:
        groups.setdefault(s.group, []).append(s.turns[0].input.hashes[40])
    # Block 40 lies inside the repository context: equal within a repository, different across.
    assert len(groups) == 2
    assert all(len(set(v)) == 1 for v in groups.values())
    assert len({v[0] for v in groups.values()}) == 2


def test_spec_parsing() -> None:
    assert parse_synthetic("synthetic:sessions=3,rate=0.5").sessions == 3
    assert load_workload("synthetic:sessions=2,steps_median=3").num_turns >= 4
    with pytest.raises(UserError, match="options are"):
        parse_synthetic("synthetic:bogus=1")
    with pytest.raises(UserError, match="needs a number"):
        parse_synthetic("synthetic:sessions=x")
    with pytest.raises(UserError, match=r"sessions must be in \[1, 100000\], got 0"):
        parse_synthetic("synthetic:sessions=0")
    with pytest.raises(UserError, match="no such workload"):
        load_workload("/nonexistent/trace.jsonl")
