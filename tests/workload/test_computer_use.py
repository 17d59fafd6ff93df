"""The computer-use generator: a screenshot after every action, keep-last-K rewriting the prompt."""

from __future__ import annotations

import statistics

import pytest

from kvharness.errors import UserError
from kvharness.workload.chain import ChainBuilder, shared_prefix_tokens
from kvharness.workload.computer_use import ComputerUseConfig, generate_computer_use
from kvharness.workload.ideal import IdealCache
from kvharness.workload.images import Image, grid_tokens
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


def _layout(w, session=0):
    """Image offsets of each turn of a keep-all session, from its content list: system, task,
    then per step a screenshot, its observation text and the model's answer."""
    cfg = ComputerUseConfig(**w.meta["config"])
    n = cfg.tokens_per_image
    turns = w.sessions[session].turns
    offsets, pos = [], cfg.system_tokens + cfg.task_tokens
    for t in turns:
        offsets.append(pos)
        pos += n + cfg.observation_tokens + t.output_tokens
    return offsets


def test_every_image_is_a_placeholder_stretch_where_the_content_list_puts_it():
    w = generate_computer_use(ComputerUseConfig(**SMALL))
    n = grid_tokens(640, 400)
    for si, s in enumerate(w.sessions):
        offsets = _layout(w, si)
        for i, t in enumerate(s.turns):
            assert [im.offset for im in t.images] == offsets[: i + 1]
            assert t.image_tokens == n * (i + 1) and t.messages is None
            assert t.images[-1].end + 30 == t.input_tokens


def test_a_prompt_is_chained_over_its_content_list_images_by_their_hash():
    from kvharness.workload.computer_use import _prompt

    cfg = ComputerUseConfig(keep_last=1, block_size=16, omitted_tokens=6)
    parts = [("text", 0, 40), ("image", 77, 50), ("text", 5, 9), ("image", 78, 50)]
    chain, images = _prompt(cfg, parts)
    b = ChainBuilder(16)
    b.extend_segment(0, 40)
    b.extend_segment(1, 6)  # the placeholder text, one segment for every session
    b.extend_segment(5, 9)
    b.extend_image(78, 50)
    assert chain == b.chain()
    assert images == (Image(55, 50, cfg.width, cfg.height, 78),)


def test_keep_last_keeps_exactly_the_last_k_screenshots_and_replaces_the_rest():
    full = generate_computer_use(ComputerUseConfig(**SMALL))
    k = 3
    last = generate_computer_use(ComputerUseConfig(**SMALL, keep_last=k))
    n = grid_tokens(640, 400)
    for fs, ls in zip(full.sessions, last.sessions, strict=True):
        assert len(fs) == len(ls)
        for ft, lt in zip(fs.turns, ls.turns, strict=True):
            assert [im.hash for im in lt.images] == [im.hash for im in ft.images[-k:]]
            dropped = len(ft.images) - len(lt.images)
            assert lt.input_tokens == ft.input_tokens - dropped * (n - 8)  # 8: the placeholder
            shift = dropped * (n - 8)
            assert [im.offset for im in lt.images] == [im.offset - shift for im in ft.images[-k:]]


def test_keep_all_hits_the_last_prompt_keep_last_stops_at_the_replaced_screenshot():
    bs = 128
    for keep in (0, 3):
        w = generate_computer_use(ComputerUseConfig(**{**SMALL, "sessions": 1}, keep_last=keep))
        turns = w.sessions[0].turns
        cache = IdealCache()
        hits = [cache.visit(t.input).tokens for t in turns]
        for i in range(1, len(turns)):
            prev = turns[i - 1]
            if keep and i >= keep:
                # turn i replaces turn i-1's oldest screenshot: the prefix ends at its block
                assert hits[i] == prev.images[0].offset // bs * bs
            else:
                assert hits[i] == prev.input.num_full_blocks * bs


def test_a_still_screen_repeats_its_hash_and_a_changing_one_never_does():
    still = generate_computer_use(ComputerUseConfig(**SMALL, repeat_prob=1))
    moving = generate_computer_use(ComputerUseConfig(**SMALL, repeat_prob=0))
    for s, m in zip(still.sessions, moving.sessions, strict=True):
        assert len({im.hash for im in s.turns[-1].images}) == 1
        assert len({im.hash for im in m.turns[-1].images}) == len(m.turns)
    # Keep-all: the previous turn's screenshot is the same stretch of blocks in this turn.
    a, b = still.sessions[0].turns[:2]
    assert shared_prefix_tokens(a.input, b.input) >= a.images[0].end // 128 * 128


def test_round_trip_through_the_workload_format(tmp_path):
    from kvharness.workload import format as wformat

    w = generate_computer_use(ComputerUseConfig(**SMALL, keep_last=2, repeat_prob=0.3))
    path = tmp_path / "cu.jsonl"
    wformat.save(w, path)
    back = wformat.load(path)
    assert back.sessions == w.sessions and back.has_images
    assert back.meta["config"]["keep_last"] == 2


def test_meta_records_the_config_and_sim_accepts_the_spec():
    from kvharness.cli._sim import _check_workload

    w = load_workload("computer-use:sessions=2,keep_last=1")
    assert w.meta["source"] == "computer-use"
    assert ComputerUseConfig(**w.meta["config"]) == ComputerUseConfig(sessions=2, keep_last=1)
    _check_workload("computer-use:sessions=2")
    with pytest.raises(UserError, match="bad computer-use option"):
        _check_workload("computer-use:width")
