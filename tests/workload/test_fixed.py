"""The fixed-shape workload: ``fixed:requests=N,input=T,output=T[,spread=F,shared_prefix=F]``."""

from __future__ import annotations

import pytest

from kvharness.errors import UserError
from kvharness.workload.chain import shared_prefix_tokens
from kvharness.workload.load import load_workload


def test_every_request_has_the_shape_asked_for() -> None:
    w = load_workload("fixed:requests=40,input=1000,output=32")
    assert len(w.sessions) == 40 and w.num_turns == 40
    assert {(s.turns[0].input_tokens, s.turns[0].output_tokens) for s in w.sessions} == {(1000, 32)}
    assert {s.start for s in w.sessions} == {0.0}
    # Nothing is shared: every request's content is its own from the first token.
    chains = [s.turns[0].input for s in w.sessions]
    assert all(shared_prefix_tokens(chains[0], c) == 0 for c in chains[1:])


def test_shared_prefix_is_common_to_all_and_the_rest_is_not() -> None:
    w = load_workload("fixed:requests=5,input=1000,output=8,shared_prefix=0.4,block_size=16")
    chains = [s.turns[0].input for s in w.sessions]
    # 400 shared tokens are 25 full blocks of 16: the chains agree on exactly those.
    assert {shared_prefix_tokens(chains[0], c) for c in chains[1:]} == {400}


def test_spread_draws_lengths_within_bounds_and_is_seeded() -> None:
    spec = "fixed:requests=200,input=1000,output=100,spread=0.2,seed=7"
    w = load_workload(spec)
    ins = [s.turns[0].input_tokens for s in w.sessions]
    outs = [s.turns[0].output_tokens for s in w.sessions]
    assert 800 <= min(ins) < 850 and 1150 < max(ins) <= 1200
    assert min(outs) >= 80 and max(outs) <= 120 and len(set(outs)) > 10
    again = load_workload(spec)
    assert [s.turns[0].input for s in again.sessions] == [s.turns[0].input for s in w.sessions]
    other = load_workload(spec.replace("seed=7", "seed=8"))
    assert [s.turns[0].input_tokens for s in other.sessions] != ins


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("fixed:requests=0", "fixed option requests must be in [1"),
        ("fixed:inputs=3", "bad fixed option 'inputs=3'; options are: block_size, input,"),
        ("fixed:input=x", "fixed option input needs a number, got 'x'"),
        ("fixed:spread=1.5", "fixed option spread must be in [0, 0.99]"),
        ("fixed:requests", "bad fixed option 'requests'"),
    ],
)
def test_bad_options_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("[", r"\[")):
        load_workload(spec)
