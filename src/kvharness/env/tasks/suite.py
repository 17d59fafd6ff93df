"""Suite definitions: which packages (pinned versions and sdist hashes), which modules to mutate,
judged by which of the package's own test files, and how many tasks each.

The default suite draws 26 tasks from four pure-Python packages whose sdists ship their tests and
whose tests need nothing but pytest and no network. Candidates checked and left out:
``sortedcontainers`` 2.4.0 (its sdist has no tests), ``humanize`` 4.17.0 (runs doctests and needs
freezegun), ``python-slugify`` 9.2.0 (needs text-unidecode), ``six`` (a single compatibility shim).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_SUITE", "SUITES", "PackageSpec", "SuiteSpec", "Target"]


@dataclass(frozen=True, slots=True)
class Target:
    """Draw ``tasks`` bugs from ``module`` (repo-relative), judged by the tests in ``tests``."""

    module: str
    tests: str
    tasks: int


@dataclass(frozen=True, slots=True)
class PackageSpec:
    """A PyPI package pinned to one sdist. ``hidden``: repo-relative test files and folders taken
    out of the agent's view (all of the package's tests). ``python_path``: repo-relative import
    roots (``"."`` flat layout, ``"src"`` src layout). ``exclude``: node-id prefixes of tests never
    used (slow ones, which would dominate build and grading time, and timing-dependent ones)."""

    name: str
    version: str
    sha256: str
    hidden: tuple[str, ...]
    targets: tuple[Target, ...]
    python_path: tuple[str, ...] = (".",)
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SuiteSpec:
    """A whole suite. ``test_deps``: pinned pip requirements of the venv tests run in.
    ``max_fail_to_pass`` / ``max_pass_to_pass``: caps on each task's lists (seeded samples), which
    bound grading time. ``max_attempts``: candidate mutants tried per target before giving up."""

    name: str
    seed: int
    packages: tuple[PackageSpec, ...]
    test_deps: tuple[str, ...] = ("pytest==9.2.0",)
    max_fail_to_pass: int = 8
    max_pass_to_pass: int = 16
    max_attempts: int = 40

    @property
    def size(self) -> int:
        return sum(t.tasks for p in self.packages for t in p.targets)


DEFAULT_SUITE = SuiteSpec(
    name="default",
    seed=20240601,
    packages=(
        PackageSpec(
            name="inflection",
            version="0.5.1",
            sha256="1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
            hidden=("test_inflection.py",),
            targets=(Target("inflection/__init__.py", "test_inflection.py", 5),),
        ),
        PackageSpec(
            name="toolz",
            version="1.2.0",
            sha256="9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490",
            hidden=("toolz/tests", "toolz/sandbox/tests"),
            targets=(
                Target("toolz/itertoolz.py", "toolz/tests/test_itertoolz.py", 3),
                Target("toolz/functoolz.py", "toolz/tests/test_functoolz.py", 2),
                Target("toolz/dicttoolz.py", "toolz/tests/test_dicttoolz.py", 2),
            ),
        ),
        PackageSpec(
            name="more-itertools",
            version="11.2.1",
            sha256="cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63",
            hidden=("tests",),
            targets=(
                Target("more_itertools/more.py", "tests/test_more.py", 4),
                Target("more_itertools/recipes.py", "tests/test_recipes.py", 3),
            ),
            exclude=(
                # 1-60 s each (the rest of the files take well under a second per test) ...
                "tests/test_recipes.py::PrimeFunctionTests::",
                "tests/test_recipes.py::PolynomialFromRootsTests::test_large",
                "tests/test_recipes.py::RunningMedianTests::",
                "tests/test_more.py::DiscreteFourierTransformTests::",
                "tests/test_more.py::ExtractTests::test_all_orderings",
                "tests/test_more.py::TestRandomOrderedRange::test_lcg_mitigation",
                # ... and thread-timing tests.
                "tests/test_more.py::TestConcurrentTee::",
                "tests/test_more.py::TestSerialize::test_concurrent_calls",
                "tests/test_more.py::TestSynchronized::test_concurrent_calls",
            ),
        ),
        PackageSpec(
            name="boltons",
            version="26.2.0",
            sha256="d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c",
            hidden=("tests",),
            targets=(
                Target("boltons/strutils.py", "tests/test_strutils.py", 2),
                Target("boltons/iterutils.py", "tests/test_iterutils.py", 2),
                Target("boltons/dictutils.py", "tests/test_dictutils.py", 1),
                Target("boltons/setutils.py", "tests/test_setutils.py", 1),
                Target("boltons/mathutils.py", "tests/test_mathutils.py", 1),
            ),
        ),
    ),
)

SMOKE_SUITE = SuiteSpec(
    name="smoke",
    seed=7,
    packages=(
        PackageSpec(
            name="inflection",
            version="0.5.1",
            sha256="1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
            hidden=("test_inflection.py",),
            targets=(Target("inflection/__init__.py", "test_inflection.py", 3),),
        ),
    ),
)
"""Three inflection tasks: what the test session builds (seconds, not minutes)."""

SUITES = {s.name: s for s in (DEFAULT_SUITE, SMOKE_SUITE)}
