"""Rollout lines read back into episodes: what ``env run --resume`` rebuilds its workload from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvharness.env.harness.client import ModelCall
from kvharness.env.harness.episode import CallRecord, EpisodeResult, ToolRun
from kvharness.env.harness.record import episode_from_line, read_rollouts, rollout_line
from kvharness.env.reward import Submission
from kvharness.errors import FormatError


def _episode(name: str = "t/0") -> EpisodeResult:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Score: 0.500"},
        {"role": "assistant", "content": "done"},
    ]
    calls = [
        CallRecord(ModelCall(0.1, 0.2, 0.3, 40, 5, None, "tool_calls"), tuple(messages[:2]), 0.0, ()),
        CallRecord(ModelCall(1.1, None, 1.4, 60, 3, 32, "stop"), tuple(messages[2:4]), 0.7, ("submit",)),
    ]  # fmt: skip
    return EpisodeResult(
        episode=name, task_id=name.split("/")[0], agent="model", reward=0.5,
        submissions=[Submission(0, 0.9, 0.5)], terminated=True, steps=1, messages=messages,
        calls=calls, tool_runs=[ToolRun("submit", 0.7, None, 0.5)],
    )  # fmt: skip


def test_a_rollout_line_reads_back_to_the_same_episode() -> None:
    ep = _episode()
    back = episode_from_line(json.loads(rollout_line(ep)))
    assert back == ep
    assert rollout_line(back) == rollout_line(ep)


def test_read_rollouts_ignores_a_torn_tail_and_names_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    good = rollout_line(_episode("a/0")) + "\n" + rollout_line(_episode("b/0")) + "\n"
    path.write_text(good + rollout_line(_episode("c/0"))[:50])
    assert [ep.episode for ep in read_rollouts(path)] == ["a/0", "b/0"]
    path.write_text(good + '{"episode": "x"}\n')
    with pytest.raises(FormatError, match=r"rollouts\.jsonl:3: not a rollout: KeyError"):
        read_rollouts(path)
    path.write_text('{"a"\n' + good)
    with pytest.raises(FormatError, match=r"rollouts\.jsonl:1: bad JSON"):
        read_rollouts(path)
