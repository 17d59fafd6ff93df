"""Rollout lines read back into episodes: what ``env run --resume`` rebuilds its workload from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvharness.env.harness.client import ModelCall
from kvharness.env.harness.episode import CallRecord, Compaction, EpisodeResult, Resume, ToolRun
from kvharness.env.harness.record import (
    call_prompts,
    episode_from_line,
    episode_session,
    read_rollouts,
    rollout_line,
)
from kvharness.env.reward import Submission
from kvharness.errors import FormatError
from kvharness.workload.chain import shared_prefix_tokens
from kvharness.workload.tokenize import load_tokenizer


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


def _compacted() -> EpisodeResult:
    """Three calls: a summary of the first exchange, then a prompt that keeps only the head."""
    head = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix it"}]
    first_reply = {"role": "assistant", "content": "looking"}
    request = {"role": "user", "content": "summarize"}
    note = {"role": "user", "content": "Summary: looked"}
    calls = [
        CallRecord(ModelCall(0.1, 0.2, 0.3, 40, 5, None, "stop"), tuple(head), 0.0, (), policy_version=3),
        CallRecord(ModelCall(0.4, 0.5, 0.6, 50, 4, 32, "stop"), (first_reply, request), 0.0, (), purpose="summarize", policy_version=3),
        CallRecord(ModelCall(0.7, 0.8, 0.9, 30, 2, 0, "stop"), (note,), 0.0, (), keep=2, policy_version=4),
    ]  # fmt: skip
    messages = [*head, first_reply, request, note]
    return EpisodeResult(
        episode="t/0", task_id="t", agent="oracle", messages=messages, calls=calls,
        compactions=[Compaction(2, "summarize", 61, 3, 2)], resumes=[Resume(1, 1, 0)],
    )  # fmt: skip


def test_compactions_resumes_and_versions_round_trip_and_cut_the_prompts() -> None:
    ep = _compacted()
    back = episode_from_line(json.loads(rollout_line(ep)))
    assert back == ep
    prompts = call_prompts(ep)
    assert [len(p) for p in prompts] == [2, 4, 3]
    assert prompts[2] == [*prompts[0], {"role": "user", "content": "Summary: looked"}]
    session = episode_session(ep, load_tokenizer(None), 16)
    assert session is not None
    assert [t.tool for t in session.turns] == [None, "summarize", None]
    assert all(t.messages is None for t in session.turns)
    first, summary, after = (t.input for t in session.turns)
    assert summary.hashes[: len(first.hashes) - 1] == first.hashes[:-1]
    assert shared_prefix_tokens(after, summary) < after.num_tokens
    plain = _episode()
    assert episode_session(plain, load_tokenizer(None), 16).turns[1].messages is not None  # type: ignore[union-attr]


def test_a_retried_episode_s_later_line_replaces_the_earlier(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    failed = _episode("a/0")
    failed.error = "model: connection refused"
    path.write_text(
        "\n".join(rollout_line(e) for e in (failed, _episode("b/0"), _episode("a/0"))) + "\n"
    )
    episodes = read_rollouts(path)
    assert [e.episode for e in episodes] == ["a/0", "b/0"]
    assert episodes[0].error is None
