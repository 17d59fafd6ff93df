"""How stale each recorded step is, from the policy versions its calls were made under."""

from __future__ import annotations

from kvharness.env.harness.client import ModelCall
from kvharness.env.harness.episode import CallRecord, EpisodeResult
from kvharness.env.harness.ray_runner import staleness


def _episode(name: str, versions: list[int | None]) -> EpisodeResult:
    call = ModelCall(0.0, 0.1, 0.2, 10, 1, 0, "stop")
    calls = [CallRecord(call, (), 0.0, (), policy_version=v) for v in versions]
    return EpisodeResult(name, "t", "oracle", calls=calls)


def test_staleness_behind_the_run_and_behind_each_episode() -> None:
    episodes = [_episode("a/0", [0, 0, 1]), _episode("b/0", [1, 2, 2]), _episode("c/0", [None])]
    assert staleness(episodes) == [2, 2, 1, 1, 0, 0]
    assert staleness(episodes, latest=3) == [3, 3, 2, 2, 1, 1]
    assert staleness(episodes, per_episode=True) == [1, 1, 0, 1, 0, 0]
    assert staleness([_episode("c/0", [None, None])]) == []
