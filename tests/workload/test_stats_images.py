"""Workload statistics of prompts with images: placeholder tokens and the ideal cache's misses."""

from __future__ import annotations

import pytest

from kvharness.cli import main
from kvharness.workload.chain import ChainBuilder
from kvharness.workload.images import Image
from kvharness.workload.model import Session, Turn, Workload
from kvharness.workload.stats import workload_stats
from kvharness.workload.synthetic import SyntheticConfig, generate

A, B = 1001, 1002  # screenshot content hashes


def _turn(parts: list[tuple[str, int, int]], gap: float = 0.0) -> Turn:
    """A turn from ("text", seed, n) / ("image", hash, n) parts, at block size 4."""
    b = ChainBuilder(4)
    images = []
    for kind, name, n in parts:
        if kind == "text":
            b.extend_segment(name, n)
        else:
            images.append(Image(b.num_tokens, n, 32, 32, name))
            b.extend_image(name, n)
    return Turn(b.chain(), 1, gap, images=tuple(images))


def _workload() -> Workload:
    first = [("text", 100, 8), ("image", A, 8), ("text", 101, 4)]  # 20 tokens, 5 full blocks
    second = [*first, ("text", 102, 4), ("image", B, 8), ("text", 103, 4)]  # 36 tokens
    # keep-last-1: A replaced by a 4-token placeholder text, the prompt rewritten from block 2
    third = [("text", 100, 8), ("text", 1, 4), *second[2:], ("text", 104, 4)]  # 36 tokens
    other = [("text", 100, 8), ("image", A, 8), ("text", 105, 4)]  # shares 16 tokens with first
    s1 = Session("s1", (_turn(first), _turn(second, 1.0), _turn(third, 1.0)), start=0.0)
    s2 = Session("s2", (_turn(other),), start=100.0)
    return Workload((s1, s2), 4)


def test_image_tokens_and_image_misses_are_counted_exactly() -> None:
    s = workload_stats(_workload())
    assert s.total_input_tokens == 20 + 36 + 36 + 20
    assert s.image_tokens == 8 + 16 + 8 + 8
    assert s.image_token_share == pytest.approx(40 / 112)
    assert (s.images_per_turn.count, s.images_per_turn.mean, s.images_per_turn.max) == (4, 1.25, 2)
    assert s.distinct_images == 2
    # hits: 0, then turn 0's 20 tokens, then the 8 before the rewrite, then s2's 16 shared ones
    assert s.ideal_miss_tokens == 112 - (0 + 20 + 8 + 16) == 68
    # missed images: A in turn 0, B new in turn 1, B again in turn 2 (after the rewrite)
    assert s.ideal_miss_image_tokens == 8 + 8 + 8
    assert s.ideal_miss_text_tokens == 68 - 24
    assert s.ideal_miss_seen_image_tokens == 8  # B recomputed in turn 2
    assert s.ideal_hit_ratio_tokens == pytest.approx(44 / 112)


def test_a_text_only_workload_has_zero_image_figures() -> None:
    s = workload_stats(generate(SyntheticConfig(sessions=2, steps_median=4, seed=1)))
    assert (s.image_tokens, s.distinct_images, s.ideal_miss_image_tokens) == (0, 0, 0)
    assert s.image_token_share == 0.0 and s.images_per_turn.max == 0
    assert s.ideal_miss_text_tokens == s.ideal_miss_tokens > 0
    assert s.ideal_miss_tokens == round(s.total_input_tokens * (1 - s.ideal_hit_ratio_tokens))


def test_keep_last_shows_as_screenshots_missed_again() -> None:
    from kvharness.workload.computer_use import ComputerUseConfig, generate_computer_use

    small = dict(sessions=2, steps_mean=10, steps_sigma=0.01, width=640, height=400)
    full = workload_stats(generate_computer_use(ComputerUseConfig(**small, repeat_prob=0)))
    last = workload_stats(
        generate_computer_use(ComputerUseConfig(**small, repeat_prob=0, keep_last=3))
    )
    # A screenshot is missed whole in its first prompt; keep-all misses it again only where it
    # ends in the previous prompt's partial last block, keep-last-3 wholly after each rewrite.
    for s in (full, last):
        assert s.distinct_images == s.requests
        assert s.ideal_miss_image_tokens == s.distinct_images * 322 + s.ideal_miss_seen_image_tokens
    assert full.ideal_miss_seen_image_tokens < 128 * full.requests
    assert last.ideal_miss_seen_image_tokens > 5 * full.ideal_miss_seen_image_tokens
    assert last.ideal_miss_text_tokens > full.ideal_miss_text_tokens


def test_the_table_shows_image_lines_only_for_images(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workload", "stats", "computer-use:sessions=2,steps_mean=4"]) == 0
    out = capsys.readouterr().out
    assert "image tokens (share of input)" in out and "images per turn" in out
    assert "ideal misses: image / text tokens" in out
    assert main(["workload", "stats", "synthetic:sessions=2,steps_median=5"]) == 0
    out = capsys.readouterr().out
    assert "image" not in out
