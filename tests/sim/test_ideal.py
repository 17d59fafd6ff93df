"""The fast per-session ideal cache answers exactly as the reference IdealCache."""

from __future__ import annotations

from kvharness.sim.ideal import SessionIdealCache
from kvharness.workload.ideal import IdealCache
from kvharness.workload.synthetic import SyntheticConfig, generate


def test_same_answers_as_ideal_cache_in_nominal_order() -> None:
    wl = generate(SyntheticConfig(sessions=12, steps_median=15, rewrite_prob=0.3, seed=2))
    ref, fast = IdealCache(), SessionIdealCache()
    n = 0
    for session, _i, turn in wl.nominal_order():
        assert fast.visit(session.id, turn.input) == ref.visit(turn.input)
        n += 1
    assert n == wl.num_turns


def test_unknown_session_and_tails() -> None:
    from kvharness.workload.chain import ChainBuilder

    b = ChainBuilder(4)
    b.extend_tokens(range(6))  # one full block and a 2-token tail
    short = b.chain()
    b.extend_tokens(range(6, 9))
    long = b.chain()
    ref, fast = IdealCache(), SessionIdealCache()
    for sid, chain in (("a", short), ("a", long), (None, short), ("b", long), ("a", short)):
        assert fast.visit(sid, chain) == ref.visit(chain)
