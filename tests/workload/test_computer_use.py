"""The computer-use generator: a screenshot after every action, keep-last-K rewriting the prompt."""

from __future__ import annotations

import statistics

import pytest

from kvharness.errors import UserError
from kvharness.workload.chain import shared_prefix_tokens
from kvharness.workload.computer_use import ComputerUseConfig, generate_computer_use
from kvharness.workload.ideal import IdealCache
from kvharness.workload.images import grid_tokens
from kvharness.workload.load import load_workload

SMALL = dict(sessions=3, steps_mean=8, steps_sigma=0.01, width=640, height=400)


def test_the_same_config_gives_the_same_workload():
    a = generate_computer_use(ComputerUseConfig(**SMALL))
    assert a.sessions == generate_computer_use(ComputerUseConfig(**SMALL)).sessions
    assert a.sessions != generate_computer_use(ComputerUseConfig(**SMALL, seed=1)).sessions
    assert load_workload("computer-use:sessions=3,steps_mean=8,steps_sigma=0.01,width=640,"
                         "height=400").sessions == a.sessions  # fmt: skip


def test_every_call_ends_with_a_new_screenshot_of_the_configured_size():
    w = generate_computer_use(ComputerUseConfig(**SMALL, repeat_prob=0))
    n = grid_tokens(640, 400)
    for s in w.sessions:
        for i, t in enumerate(s.turns):
            assert len(t.images) == i + 1  # keep-all
            assert all(im.tokens == n and (im.width, im.height) == (640, 400) for im in t.images)
            assert t.input_tokens - t.images[-1].end == 30  # the observation's text
        assert len({im.hash for im in s.turns[-1].images}) == len(s.turns)


def test_keep_all_prompts_extend_the_last_and_keep_last_k_breaks_the_prefix():
    full = generate_computer_use(ComputerUseConfig(**SMALL))
    last3 = generate_computer_use(ComputerUseConfig(**SMALL, keep_last=3))
    for s in full.sessions:
        for a, b in zip(s.turns, s.turns[1:], strict=False):
            assert shared_prefix_tokens(a.input, b.input) >= a.input_tokens - 128
    for s in last3.sessions:
        assert [len(t.images) for t in s.turns] == [min(i + 1, 3) for i in range(len(s.turns))]
        a, b = s.turns[3], s.turns[4]
        # The first screenshot of turn 3 is text in turn 4: reuse stops at the block it starts in.
        assert shared_prefix_tokens(a.input, b.input) <= a.images[0].offset
    ideal_full, ideal_last = IdealCache(), IdealCache()
    hit_full = sum(ideal_full.visit(t.input).tokens for s in full.sessions for t in s.turns)
    hit_last = sum(ideal_last.visit(t.input).tokens for s in last3.sessions for t in s.turns)
    prompt_full = sum(t.input_tokens for s in full.sessions for t in s.turns)
    prompt_last = sum(t.input_tokens for s in last3.sessions for t in s.turns)
    assert hit_last / prompt_last < hit_full / prompt_full - 0.15


def test_sessions_share_the_system_prompt_and_a_still_screen_shares_its_blocks():
    w = generate_computer_use(ComputerUseConfig(**SMALL, repeat_prob=1))
    a, b = w.sessions[0].turns[0], w.sessions[1].turns[0]
    assert shared_prefix_tokens(a.input, b.input) == 1408  # the 1,500 system tokens' 11 blocks
    t = w.sessions[0].turns
    assert len({im.hash for im in t[-1].images}) == 1  # the screen never changed


def test_steps_follow_the_configured_mean():
    w = generate_computer_use(ComputerUseConfig(sessions=400, system_tokens=10, width=56, height=56,
                                                steps_mean=20, steps_max=10_000))  # fmt: skip
    assert statistics.mean(len(s) for s in w.sessions) == pytest.approx(20, rel=0.15)


def test_a_bad_option_is_a_user_error():
    with pytest.raises(UserError, match="bad computer-use option 'nope=1'"):
        load_workload("computer-use:nope=1")
    with pytest.raises(UserError, match="keep_last must be in"):
        load_workload("computer-use:keep_last=-1")
