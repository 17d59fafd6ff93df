"""Task suites built from real packages: suite definitions, AST mutations, the builder."""

from __future__ import annotations

from kvharness.env.tasks.builder import BuildStats, build_suite, ensure_venv, fetch_sdist
from kvharness.env.tasks.suite import (
    DEFAULT_SUITE,
    SMOKE_SUITE,
    SUITES,
    PackageSpec,
    SuiteSpec,
    Target,
)

__all__ = [
    "DEFAULT_SUITE",
    "SMOKE_SUITE",
    "SUITES",
    "BuildStats",
    "PackageSpec",
    "SuiteSpec",
    "Target",
    "build_suite",
    "ensure_venv",
    "fetch_sdist",
]
