"""Chain suite definitions: which functions of which pinned package become each task's milestones.

The packages are the default coding suite's (same pinned sdists, hidden test folders and excluded
slow tests, :data:`~kvharness.env.tasks.suite.DEFAULT_SUITE`). Each chain names its functions;
the builder orders them so a function comes after every chosen function it calls (``builder.py``)
and keeps those whose own tests can judge them one at a time. Chains that take functions from two
modules (the boltons ones) give milestones whose tests import different files, which is where the
grading cache saves runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvharness.env.tasks.suite import DEFAULT_SUITE, PYTEST_DEPS, PackageSpec

__all__ = [
    "CHAIN_SUITES",
    "DEFAULT_CHAIN_SUITE",
    "SMOKE_CHAIN_SUITE",
    "ChainPackage",
    "ChainSpec",
    "ChainSuiteSpec",
]


@dataclass(frozen=True, slots=True)
class ChainSpec:
    """One task: stub ``functions`` (``"repo/relative/module.py:name"``, top-level functions),
    judged by the package's tests in the files ``tests`` (repo-relative)."""

    functions: tuple[str, ...]
    tests: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.functions) < 2 or any(":" not in f for f in self.functions):
            raise ValueError("a chain names at least two functions as 'module.py:name'")


@dataclass(frozen=True, slots=True)
class ChainPackage:
    """The chains drawn from one pinned package."""

    package: PackageSpec
    chains: tuple[ChainSpec, ...]


@dataclass(frozen=True, slots=True)
class ChainSuiteSpec:
    """A chain suite. ``max_tests``: cap on each milestone's tests (a seeded sample, preferring
    tests named after the function); ``max_pass_to_pass``: cap on each task's PASS_TO_PASS.
    ``test_deps``: the locked requirements of the venv tests run in (as the coding suites')."""

    name: str
    seed: int
    packages: tuple[ChainPackage, ...]
    test_deps: tuple[str, ...] = PYTEST_DEPS
    max_tests: int = 8
    max_pass_to_pass: int = 16

    @property
    def size(self) -> int:
        return sum(len(p.chains) for p in self.packages)


_PKG = {p.name: p for p in DEFAULT_SUITE.packages}


def _fns(module: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{module}:{n}" for n in names)


_INFLECTION_A = ChainSpec(
    _fns("inflection/__init__.py", "underscore", "humanize", "titleize", "pluralize", "tableize"),
    ("test_inflection.py",),
)

DEFAULT_CHAIN_SUITE = ChainSuiteSpec(
    name="chain",
    seed=20261204,
    packages=(
        ChainPackage(
            _PKG["inflection"],
            (
                _INFLECTION_A,
                ChainSpec(
                    _fns(
                        "inflection/__init__.py",
                        "parameterize",
                        "ordinal",
                        "ordinalize",
                        "camelize",
                        "dasherize",
                    ),
                    ("test_inflection.py",),
                ),
            ),
        ),
        ChainPackage(
            _PKG["toolz"],
            (
                ChainSpec(
                    _fns(
                        "toolz/itertoolz.py",
                        "tail",
                        "last",
                        "concat",
                        "concatv",
                        "mapcat",
                        "interpose",
                    ),
                    ("toolz/tests/test_itertoolz.py",),
                ),
                ChainSpec(
                    _fns(
                        "toolz/dicttoolz.py",
                        "update_in",
                        "assoc_in",
                        "get_in",
                        "merge",
                        "merge_with",
                        "valmap",
                    ),
                    ("toolz/tests/test_dicttoolz.py",),
                ),
                ChainSpec(
                    _fns(
                        "toolz/functoolz.py",
                        "apply",
                        "thread_first",
                        "thread_last",
                        "compose",
                        "compose_left",
                        "complement",
                        "pipe",
                    ),
                    ("toolz/tests/test_functoolz.py",),
                ),
            ),
        ),
        ChainPackage(
            _PKG["more-itertools"],
            (
                ChainSpec(
                    _fns(
                        "more_itertools/recipes.py",
                        "unique_justseen",
                        "unique",
                        "transpose",
                        "matmul",
                        "convolve",
                        "polynomial_from_roots",
                    ),
                    ("tests/test_recipes.py",),
                ),
                ChainSpec(
                    _fns(
                        "more_itertools/recipes.py",
                        "quantify",
                        "pad_none",
                        "ncycles",
                        "dotproduct",
                        "first_true",
                        "polynomial_derivative",
                    ),
                    ("tests/test_recipes.py",),
                ),
            ),
        ),
        ChainPackage(
            _PKG["boltons"],
            (
                ChainSpec(
                    _fns("boltons/strutils.py", "iter_splitlines", "indent", "parse_int_list")
                    + _fns("boltons/iterutils.py", "split", "first", "chunk_ranges"),
                    ("tests/test_strutils.py", "tests/test_iterutils.py"),
                ),
                ChainSpec(
                    _fns("boltons/strutils.py", "strip_ansi", "asciify", "is_uuid", "bytes2human")
                    + _fns("boltons/iterutils.py", "partition", "xfrange", "frange"),
                    ("tests/test_strutils.py", "tests/test_iterutils.py"),
                ),
            ),
        ),
    ),
)
"""Nine tasks of five to seven milestones from the four packages of the default suite."""

SMOKE_CHAIN_SUITE = ChainSuiteSpec(
    name="chain-smoke",
    seed=7,
    packages=(ChainPackage(_PKG["inflection"], (_INFLECTION_A,)),),
)
"""One inflection task of five milestones (underscore, humanize, titleize, pluralize, tableize):
what the test session builds, in seconds."""

CHAIN_SUITES = {s.name: s for s in (DEFAULT_CHAIN_SUITE, SMOKE_CHAIN_SUITE)}
