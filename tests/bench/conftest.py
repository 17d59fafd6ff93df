"""Factories for bench tests: small coding-agent workloads built from block chains."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvharness.workload.chain import ChainBuilder
from kvharness.workload.format import save
from kvharness.workload.model import Arrival, Session, Turn, Workload


def agent_workload(
    *,
    sessions: int = 3,
    repos: int = 1,
    repo_tokens: int = 3000,
    turns: int = 4,
    task_tokens: int = 200,
    observation_tokens: int = 300,
    output_tokens: int = 16,
    gap: float = 0.2,
    start_spacing: float = 0.5,
    block_size: int = 128,
    seed: int = 0,
) -> Workload:
    """Sessions of a coding agent: a shared repository prefix (per repo), the session's task, then
    per turn the previous answer and a tool observation appended (the prompt grows each turn)."""
    out = []
    for si in range(sessions):
        repo = si % repos
        b = ChainBuilder(block_size)
        b.extend_segment(seed * 1000 + 1 + repo, repo_tokens)
        b.extend_segment(seed * 1000 + 100 + si, task_tokens)
        ts = []
        for ti in range(turns):
            ts.append(
                Turn(
                    b.chain(),
                    output_tokens,
                    gap=0.0 if ti == 0 else gap,
                    tool="bash" if ti else None,
                )
            )
            b.extend_segment(seed * 1000 + 10_000 + si * 100 + ti, output_tokens)
            b.extend_segment(seed * 1000 + 20_000 + si * 100 + ti, observation_tokens)
        out.append(Session(f"s{si}", tuple(ts), start=si * start_spacing, group=f"repo{repo}"))
    return Workload(tuple(out), block_size, name="agent-test", arrival=Arrival("trace"))


@pytest.fixture
def agent_workload_file(tmp_path: Path) -> Path:
    """The default :func:`agent_workload` saved in the project's workload format."""
    path = tmp_path / "agent.jsonl"
    save(agent_workload(), path)
    return path
