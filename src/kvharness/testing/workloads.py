"""Small coding-agent workloads built straight from block chains, for tests and benchmarks."""

from __future__ import annotations

from kvharness.workload.chain import ChainBuilder
from kvharness.workload.model import Arrival, Session, Turn, Workload

__all__ = ["agent_workload"]


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
    """Sessions of a coding agent: session ``i`` works on repository ``i % repos`` (a shared prefix
    of ``repo_tokens``), then its own task; each later turn appends the previous answer
    (``output_tokens``) and a tool observation (``observation_tokens``), so prompts grow. Turns
    are ``gap`` seconds apart (after the previous answer); sessions start ``start_spacing`` apart
    (trace arrival). Token counts are tokens; ``seed`` changes every block."""
    out = []
    base = seed * 1_000_000
    for si in range(sessions):
        b = ChainBuilder(block_size)
        b.extend_segment(base + 1 + si % repos, repo_tokens)
        b.extend_segment(base + 1000 + si, task_tokens)
        ts = []
        for ti in range(turns):
            ts.append(Turn(b.chain(), output_tokens, gap=gap if ti else 0.0,
                           tool="bash" if ti else None))  # fmt: skip
            b.extend_segment(base + 100_000 + si * 1000 + ti, output_tokens)
            b.extend_segment(base + 500_000 + si * 1000 + ti, observation_tokens)
        out.append(
            Session(f"s{si}", tuple(ts), start=si * start_spacing, group=f"repo{si % repos}")
        )
    return Workload(tuple(out), block_size, name="agent-test", arrival=Arrival("trace"))
