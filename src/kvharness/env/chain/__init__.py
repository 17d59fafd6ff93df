"""Multi-milestone coding tasks: one repository, K stubbed functions restored in order.

``task.py`` (the task and its ``task.json``), ``stubs.py`` (stubbing and ordering functions),
``suite.py`` (which functions of which pinned package), ``builder.py`` (finding each milestone's
tests, writing a suite), ``imports.py`` (the import closure the grading cache is keyed on) and
``grading.py`` (prefix scoring with the cache).
"""

from __future__ import annotations

from kvharness.env.chain.builder import build_chain_suite, ensure_chain_suite
from kvharness.env.chain.grading import ChainGrader, ChainGradeResult, MilestoneOutcome
from kvharness.env.chain.suite import (
    CHAIN_SUITES,
    DEFAULT_CHAIN_SUITE,
    SMOKE_CHAIN_SUITE,
    ChainPackage,
    ChainSpec,
    ChainSuiteSpec,
)
from kvharness.env.chain.task import CHAIN_TASK_FORMAT, ChainTask, Milestone, load_chain_task

__all__ = [
    "CHAIN_SUITES",
    "CHAIN_TASK_FORMAT",
    "DEFAULT_CHAIN_SUITE",
    "SMOKE_CHAIN_SUITE",
    "ChainGradeResult",
    "ChainGrader",
    "ChainPackage",
    "ChainSpec",
    "ChainSuiteSpec",
    "ChainTask",
    "Milestone",
    "MilestoneOutcome",
    "build_chain_suite",
    "ensure_chain_suite",
    "load_chain_task",
]
