"""The long-horizon generator: long sessions whose context is compacted at the window, and what
each compaction does to the prefix a cache can reuse."""

from __future__ import annotations

import pytest

from kvharness.errors import UserError
from kvharness.workload.load import load_workload
from kvharness.workload.long_horizon import LongHorizonConfig, generate_long_horizon

SMALL = {
    "sessions": 3, "repos": 2, "turns_min": 60, "turns_max": 90, "window": 20_000,
    "system_tokens": 1000, "repo_tokens": 2000, "task_tokens": 100, "summary_tokens": 500,
    "tool_median": 400.0, "tool_max": 3000, "output_median": 60.0, "block_size": 16,
}  # fmt: skip


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@pytest.mark.parametrize("compaction", ["summarize", "drop-outputs", "keep-last"])
def test_sessions_stay_under_the_window_and_compact(compaction: str) -> None:
    cfg = LongHorizonConfig(**SMALL, compaction=compaction)
    w = generate_long_horizon(cfg)
    assert w == generate_long_horizon(cfg)  # deterministic in the config
    limit = cfg.window * cfg.compact_at
    assert sum(w.meta["compactions"].values()) > 0
    for s in w.sessions:
        assert cfg.turns_min <= len(s.turns) <= cfg.turns_max + w.meta["compactions"][s.id]
        head = (cfg.system_tokens + cfg.repo_tokens + cfg.task_tokens) // cfg.block_size
        for prev, turn in zip(s.turns, s.turns[1:], strict=False):
            # A summarize call reads the whole context: it need only fit the window.
            bound = cfg.window - cfg.summary_tokens if turn.tool == "summarize" else limit
            assert turn.input.num_tokens <= bound
            shared = _common(prev.input.hashes, turn.input.hashes)
            if turn.tool == "summarize":
                # It reads the whole context (after dropping outputs, in that mode).
                assert shared >= head
            elif turn.tool == "compact":
                # The prefix breaks: at most what precedes the first rewritten part survives.
                assert shared < len(prev.input.hashes) - 1
                assert shared >= head  # the system prompt, repository map and task stay
            elif turn.tool == "tool":
                # Between compactions each prompt extends the last (all but its open block).
                assert shared >= len(prev.input.hashes) - 1
        if compaction == "summarize":
            summaries = [t for t in s.turns if t.tool == "summarize"]
            assert len(summaries) == w.meta["compactions"][s.id]
            assert all(t.output_tokens == cfg.summary_tokens for t in summaries)


def test_sessions_on_a_repository_share_its_map() -> None:
    w = generate_long_horizon(LongHorizonConfig(**SMALL))
    a, b, c = (s.turns[0].input.hashes for s in w.sessions)
    head = (1000 + 2000) // 16
    assert _common(a, c) >= head and w.sessions[0].group == w.sessions[2].group
    assert 1000 // 16 <= _common(a, b) < head  # another repository: the system prompt only


def test_specs_and_bad_options() -> None:
    w = load_workload("long-horizon:sessions=2,turns_min=5,turns_max=5,compaction=keep-last")
    assert [len(s.turns) for s in w.sessions] == [5, 5]
    with pytest.raises(UserError, match="compaction must be one of"):
        load_workload("long-horizon:compaction=forget")
    with pytest.raises(UserError, match="turns_min must be <= turns_max"):
        load_workload("long-horizon:turns_min=10,turns_max=5")
    with pytest.raises(UserError, match="do not fit"):
        load_workload("long-horizon:window=1000")
