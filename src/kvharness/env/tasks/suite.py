"""Suite definitions: which packages (pinned versions and sdist hashes), which modules to mutate,
judged by which of the package's own test files, and how many tasks each.

The default suite draws 26 tasks from four pure-Python packages whose sdists ship their tests and
whose tests need nothing but pytest and no network. Candidates checked and left out:
``sortedcontainers`` 2.4.0 (its sdist has no tests), ``humanize`` 4.17.0 (runs doctests and needs
freezegun), ``python-slugify`` 9.2.0 (needs text-unidecode), ``six`` (a single compatibility shim).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_SUITE", "PYTEST_DEPS", "SUITES", "PackageSpec", "SuiteSpec", "Target"]


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


PYTEST_DEPS: tuple[str, ...] = (
    "iniconfig==2.3.1"
    " --hash=sha256:67f4b9c50da0dedf52af349e7749a80a9057a5031199791b906c3bb3ae878960"
    " --hash=sha256:9121e2c1fdb355232495be3194c8dfe87ccc2d5dee45947b78e68f499790d7a7",
    "packaging==26.4"
    " --hash=sha256:81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2"
    " --hash=sha256:c4b671c41ddb9bf26e543c37723610d28fb6bf7affc4da17cf048d419d2c062a",
    "pluggy==1.7.0"
    " --hash=sha256:7dd7b0d8832ba3cb632c306926ded123429211b83641b35dc5c41ad2d34f9bec"
    " --hash=sha256:d1eaa46ebb595891b860ab086b4d09c8588af65ebd4361b8e8f4bb8920b90ba8",
    "pygments==2.21.0"
    " --hash=sha256:2363c69b61c4a97c838da3b130dcd6468f4848992b21a82f2a63ec34377137d9"
    " --hash=sha256:610ca751c9bc2492b38eb9a38a7fbc93edbbb2d7182edaf34e66ae493dee5c8c",
    "pytest==9.2.0"
    " --hash=sha256:07acdcf88ec174f907dc01af70bf52d49b014bbab03faeeade31c96b18c2e588"
    " --hash=sha256:97c4f3b1f3c7414aa36465e09b8220f1d03627993bd51b1282e193753c80557b",
)
"""pytest 9.2.0 and its dependencies, locked with hashes (``pip-compile --generate-hashes`` of
``pytest==9.2.0``)."""


@dataclass(frozen=True, slots=True)
class SuiteSpec:
    """A whole suite. ``test_deps``: the pip requirement lines of the venv tests run in, the whole
    closure each pinned with its hashes (pip then installs in hash-checking mode, so a changed
    upstream release cannot change what the tasks are graded with).
    ``max_fail_to_pass`` / ``max_pass_to_pass``: caps on each task's lists (seeded samples), which
    bound grading time. ``max_attempts``: candidate mutants tried per target before giving up."""

    name: str
    seed: int
    packages: tuple[PackageSpec, ...]
    test_deps: tuple[str, ...] = PYTEST_DEPS
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
