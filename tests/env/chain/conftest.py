"""The chain tests' suite: SMOKE_CHAIN_SUITE built once by the real builder under .cache/.

Keyed, like ``smoke_suite``, by the suite's definition and the code that builds it (the chain
package, the coding-task builder it reuses, the sandbox and the grader), so a change to either
rebuilds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import kvharness.env.chain as chain_pkg
from kvharness.env.chain import SMOKE_CHAIN_SUITE, ChainTask, build_chain_suite
from kvharness.env.task import load_suite
from kvharness.testing.suites import built_once

REPO = Path(__file__).resolve().parents[3]
CACHE = REPO / ".cache"


@pytest.fixture(scope="session")
def chain_suite(env_venv: Path) -> list[ChainTask]:
    """SMOKE_CHAIN_SUITE (one inflection task, five milestones), built by the real builder."""
    env_dir = Path(chain_pkg.__file__).parents[1]
    code = sorted(env_dir.glob("chain/*.py")) + sorted(env_dir.glob("tasks/*.py"))
    code += [env_dir / name for name in ("sandbox.py", "grading.py", "task.py", "workspace.py")]
    key = repr(SMOKE_CHAIN_SUITE).encode() + b"".join(p.read_bytes() for p in code)
    out = built_once(
        CACHE / "env-test", "chain-smoke", key,
        lambda out: build_chain_suite(SMOKE_CHAIN_SUITE, out, venv=env_venv,
                                      cache=CACHE / "sdists", progress=False),
    )  # fmt: skip
    tasks = [t for t in load_suite(out) if isinstance(t, ChainTask)]
    assert tasks
    return tasks


@pytest.fixture(scope="session")
def chain_task(chain_suite: list[ChainTask]) -> ChainTask:
    return chain_suite[0]
