"""The twin's pieces that need no engine: the bench's own routing, what a turn's error is blamed
on, and the errors it refuses with."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvharness.cli import main
from kvharness.report.records import TurnRecord
from kvharness.routing.base import ReplicaState, RouteRequest
from kvharness.sim.twin import SessionRoundRobin, TurnPair, blame


def _req(session: str) -> RouteRequest:
    return RouteRequest(f"{session}/x", session, (), 10, 1)


def test_sessions_go_round_robin_in_start_order_and_stay() -> None:
    policy = SessionRoundRobin()
    states = [ReplicaState(f"r{i}", 10, 16) for i in range(3)]
    picks = [policy.choose(_req(s), states, range(3), [0, 0, 0], 0.0).replica
             for s in ("a", "b", "a", "c", "d", "b")]  # fmt: skip
    assert picks == [0, 1, 0, 2, 0, 1]


def _rec(ttft: float, e2e: float, cached: int, scheduled: float | None = None) -> TurnRecord:
    return TurnRecord("s", 0, "r", 0.0, 0.0, ttft, e2e, 1000, cached, 1000, 10, scheduled=scheduled)


@pytest.mark.parametrize(
    ("measured", "predicted", "part"),
    [
        (_rec(0.1, 1.0, 0), _rec(0.1, 1.0, 512), "cache miss"),
        (_rec(0.1, 1.0, 512), _rec(0.1, 1.0, 0), "cache hit"),
        (_rec(0.1, 1.0, 0), _rec(0.5, 1.4, 0, scheduled=0.4), "queueing"),
        (_rec(0.1, 1.0, 0), _rec(0.5, 1.4, 0, scheduled=0.01), "prefill"),
        (_rec(0.1, 1.0, 0), _rec(0.12, 2.0, 0), "decode"),
    ],
)
def test_a_turn_is_blamed_on_the_part_most_off(
    measured: TurnRecord, predicted: TurnRecord, part: str
) -> None:
    assert blame(TurnPair("s", 0, measured, predicted), 128) == part


def test_the_twin_asks_for_what_it_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "--twin", str(tmp_path)]) == 2
    assert "give --profile PATH" in capsys.readouterr().err
    assert main(["sim", "--twin", str(tmp_path), "--profile", str(tmp_path / "p.json")]) == 2
    assert "not a bench run directory" in capsys.readouterr().err
    assert main(["sim", "calibrate"]) == 2
    assert "give the bench run directories" in capsys.readouterr().err
    bad = ["--router", "agent_aware:bogus=1", "--router-replicas", "2"]
    assert main(["sim", "--twin", str(tmp_path), "--profile", str(tmp_path / "p.json"), *bad]) == 2
    assert "the router's policy: policy 'agent_aware:bogus=1'" in capsys.readouterr().err
